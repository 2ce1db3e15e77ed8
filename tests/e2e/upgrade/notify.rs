//! What systemd hears across a live upgrade, read on a notify socket of
//! the test's own with the sender's credentials: the first process says
//! READY=1 and pings the watchdog; the new one says MAINPID=<its pid> and
//! READY=1 and takes the watchdog over; nobody says STOPPING=1.

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

use crate::support::nodes::Node;
use crate::support::proxy::Proxy;
use crate::support::upgrade::{Bin, config, upgrade_ok, wait_exited};
use crate::support::wait_until;

/// Datagrams received so far: (sender pid, text).
type Heard = Arc<Mutex<Vec<(u32, String)>>>;

fn listen(sock: UnixDatagram) -> Heard {
    rustix::net::sockopt::set_socket_passcred(&sock, true).expect("SO_PASSCRED");
    let heard: Heard = Arc::default();
    let sink = heard.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut iov = [IoSliceMut::new(&mut buf)];
            let Ok(got) = rustix::net::recvmsg(&sock, &mut iov, &mut control, RecvFlags::empty())
            else {
                return;
            };
            let mut pid = 0;
            for msg in control.drain() {
                if let RecvAncillaryMessage::ScmCredentials(cred) = msg {
                    pid = cred.pid.as_raw_nonzero().get() as u32;
                }
            }
            let text = String::from_utf8_lossy(&buf[..got.bytes]).into_owned();
            sink.lock().unwrap().push((pid, text));
        }
    });
    heard
}

fn said(heard: &Heard, pid: u32, what: &str) -> bool {
    heard
        .lock()
        .unwrap()
        .iter()
        .any(|(p, text)| *p == pid && text.lines().any(|l| l == what))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_process_names_itself_main_and_takes_over_the_watchdog() {
    let node = Node::echo().await;
    let bin = Bin::new();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("notify.sock");
    let heard = listen(UnixDatagram::bind(&socket).unwrap());
    // As systemd starts a service: WATCHDOG_PID is the service's own pid.
    let wrapper = dir.path().join("start.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexport WATCHDOG_PID=$$\nexec {} \"$@\"\n",
            bin.path().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = [
        ("NOTIFY_SOCKET", socket.to_str().unwrap()),
        ("WATCHDOG_USEC", "200000"),
    ];
    let proxy = Proxy::start_from(&wrapper, &config(&[node.addr], ""), &env).await;
    let first = proxy.pid();
    let t = Duration::from_secs(10);
    wait_until("READY=1 from the first process", t, || {
        said(&heard, first, "READY=1")
    })
    .await;
    wait_until("a watchdog ping from the first", t, || {
        said(&heard, first, "WATCHDOG=1")
    })
    .await;

    let done = upgrade_ok(&proxy).await;
    let second = done["pid"].as_u64().unwrap() as u32;
    assert_ne!(second, first);
    let main_pid = format!("MAINPID={second}");
    wait_until("MAINPID= and READY=1 from the new process", t, || {
        heard.lock().unwrap().iter().any(|(p, text)| {
            *p == second
                && text.lines().any(|l| l == main_pid)
                && text.lines().any(|l| l == "READY=1")
        })
    })
    .await;
    wait_exited(first).await;
    let pings_before = heard.lock().unwrap().len();
    wait_until("a watchdog ping from the new process", t, || {
        heard.lock().unwrap()[pings_before..]
            .iter()
            .any(|(p, text)| *p == second && text.lines().any(|l| l == "WATCHDOG=1"))
    })
    .await;
    assert!(
        !heard
            .lock()
            .unwrap()
            .iter()
            .any(|(_, t)| t.contains("STOPPING=1")),
        "an upgrade is not a stop: {:?}",
        heard.lock().unwrap()
    );
}
