# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_pin_proxy_global_optspecs
    string join \n c/config= h/help V/version
end

function __fish_pin_proxy_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_pin_proxy_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_pin_proxy_using_subcommand
    set -l cmd (__fish_pin_proxy_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "run" -d 'Run the balancer (the default command)'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "check" -d 'Parse and validate the config, print the effective pools, bind nothing. Exits 0 when valid, 2 when not'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "status" -d 'Show a running instance\'s pools and backends (reads `/status`)'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "quarantine" -d 'Put a backend into maintenance: no new clients, its connections drained, for exactly this long'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "release" -d 'End a backend\'s quarantine now (it returns once its probes pass)'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "connections" -d 'List a running instance\'s client connections, newest first (reads `/connections`): who is pinned to which node, since when, how much traffic, how long idle'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "close" -d 'Close client connections by id (`conn` in the logs and in `connections`). Exits 1 when any is unknown (the others are closed)'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "shed" -d 'Close a backend\'s N newest connections, spread over `health.drain_spread` (their clients redial)'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "reload" -d 'Re-read the config file of a running instance and apply it (as SIGHUP does). Exits 0 when applied, 1 when refused (the instance then runs on its old config) or unreachable'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "upgrade" -d 'Live upgrade: start the binary this instance was started from, hand it every listener and connection, and exit once it serves. Exits 0 when done, 1 when it failed (the instance then serves on unchanged)'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "demo" -d 'Self-contained demo on loopback: simulated P2P nodes, clients, a scripted failure, recovery and lag. Ends by itself'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "completions" -d 'Print a shell completion script to stdout'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "man" -d 'Print the man page (roff) to stdout'
complete -c pin-proxy -n "__fish_pin_proxy_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand run" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand run" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand run" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand check" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand check" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand check" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand status" -l admin -d 'Admin endpoint of the running instance [default: admin.listen of the config, else 127.0.0.1:9900]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand status" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand status" -l json -d 'Print the raw JSON instead of a table'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand status" -l watch -d 'Fetch and print again every second until Ctrl-C'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand status" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand status" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand quarantine" -l for -d 'How long, e.g. `10m`' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand quarantine" -l admin -d 'Admin endpoint of the running instance [default: admin.listen of the config, else 127.0.0.1:9900]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand quarantine" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand quarantine" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand quarantine" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand release" -l admin -d 'Admin endpoint of the running instance [default: admin.listen of the config, else 127.0.0.1:9900]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand release" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand release" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand release" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -l pool -d 'Only this pool\'s' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -l backend -d 'Only those on backends of this name' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -l client -d 'Only clients in this network (`10.0.0.0/8`) or at this address' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -l limit -d 'How many, the newest [default: 100, at most 10000]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -l admin -d 'Admin endpoint of the running instance [default: admin.listen of the config, else 127.0.0.1:9900]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -l json -d 'Print the raw JSON instead of a table'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand connections" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand close" -l admin -d 'Admin endpoint of the running instance [default: admin.listen of the config, else 127.0.0.1:9900]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand close" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand close" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand close" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand shed" -l admin -d 'Admin endpoint of the running instance [default: admin.listen of the config, else 127.0.0.1:9900]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand shed" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand shed" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand shed" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand reload" -l admin -d 'Admin endpoint of the running instance [default: admin.listen of the config, else 127.0.0.1:9900]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand reload" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand reload" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand reload" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand upgrade" -l admin -d 'Admin endpoint of the running instance [default: admin.listen of the config, else 127.0.0.1:9900]' -r
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand upgrade" -s c -l config -d 'Config file [default: config.yaml, env PIN_PROXY_CONFIG]' -r -F
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand upgrade" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand upgrade" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand demo" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand demo" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand completions" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand completions" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand man" -s h -l help -d 'Print help'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand man" -s V -l version -d 'Print version'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "run" -d 'Run the balancer (the default command)'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "check" -d 'Parse and validate the config, print the effective pools, bind nothing. Exits 0 when valid, 2 when not'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "status" -d 'Show a running instance\'s pools and backends (reads `/status`)'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "quarantine" -d 'Put a backend into maintenance: no new clients, its connections drained, for exactly this long'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "release" -d 'End a backend\'s quarantine now (it returns once its probes pass)'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "connections" -d 'List a running instance\'s client connections, newest first (reads `/connections`): who is pinned to which node, since when, how much traffic, how long idle'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "close" -d 'Close client connections by id (`conn` in the logs and in `connections`). Exits 1 when any is unknown (the others are closed)'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "shed" -d 'Close a backend\'s N newest connections, spread over `health.drain_spread` (their clients redial)'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "reload" -d 'Re-read the config file of a running instance and apply it (as SIGHUP does). Exits 0 when applied, 1 when refused (the instance then runs on its old config) or unreachable'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "upgrade" -d 'Live upgrade: start the binary this instance was started from, hand it every listener and connection, and exit once it serves. Exits 0 when done, 1 when it failed (the instance then serves on unchanged)'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "demo" -d 'Self-contained demo on loopback: simulated P2P nodes, clients, a scripted failure, recovery and lag. Ends by itself'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "completions" -d 'Print a shell completion script to stdout'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "man" -d 'Print the man page (roff) to stdout'
complete -c pin-proxy -n "__fish_pin_proxy_using_subcommand help; and not __fish_seen_subcommand_from run check status quarantine release connections close shed reload upgrade demo completions man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
