//! Live upgrade through the real binary: every listener and connection
//! handed to a new process, nothing lost, nothing closed, nobody refused.
//! `failures` covers the upgrades that must change nothing, `health` the
//! state that goes over, `counts` the metrics that go on, `notify` what
//! systemd is told. Their harness is
//! `support::upgrade`.

mod connecting;
mod counts;
mod exact;
mod failures;
mod health;
mod load;
mod notify;
mod rollback;
mod stop;
