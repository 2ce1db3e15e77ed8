//! The data path's threads: one single-threaded tokio runtime per core.
//!
//! Each pool listen address is bound once per worker with `SO_REUSEPORT`;
//! the kernel spreads clients across the sockets, and a worker accepts,
//! connects and splices its clients on its own thread, with its own epoll
//! instance, as HAProxy's threads do. Nothing is handed between threads on
//! the way, which is what keeps the latency tail short under load (a shared
//! multi-thread runtime polls one epoll instance at a time and moves woken
//! tasks between workers). Everything else (admin, probes, rebalance,
//! reload) runs on the main runtime.

use std::io;
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The worker threads; dropping this stops them (their remaining tasks are
/// dropped, which closes their sockets).
#[derive(Debug)]
pub struct Workers {
    handles: Vec<Handle>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// One worker per CPU this process may run on.
    ///
    /// # Errors
    /// A thread or runtime that cannot be created.
    pub fn per_core() -> io::Result<Workers> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        Workers::start(n)
    }

    /// `n` workers (at least one).
    ///
    /// # Errors
    /// A thread or runtime that cannot be created.
    pub fn start(n: usize) -> io::Result<Workers> {
        let mut workers = Workers {
            handles: Vec::new(),
            stops: Vec::new(),
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let (stop, stopped) = oneshot::channel::<()>();
            let (ready, handle) = std::sync::mpsc::channel();
            let thread = std::thread::Builder::new()
                .name(format!("pin-proxy-data-{i}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    match rt {
                        Ok(rt) => {
                            let _ = ready.send(Ok(rt.handle().clone()));
                            // Runs this thread's tasks until told to stop.
                            let _ = rt.block_on(stopped);
                        }
                        Err(e) => {
                            let _ = ready.send(Err(e));
                        }
                    }
                })?;
            workers.threads.push(thread);
            workers.stops.push(stop);
            let handle = handle
                .recv()
                .map_err(|_| io::Error::other("data worker exited at start"))??;
            workers.handles.push(handle);
        }
        Ok(workers)
    }

    /// How many workers there are.
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// Every worker's loop.
    pub fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// Worker `i` (taken modulo the count).
    pub fn handle(&self, i: usize) -> &Handle {
        &self.handles[i % self.handles.len()]
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
