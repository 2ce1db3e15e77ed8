//! A process the load tool starts: killed and reaped when dropped, so a
//! measurement that fails or is interrupted leaves none behind.

use std::process::{Child, Command};

use anyhow::{Context, bail};

/// A running child process and what to call it in errors.
pub struct Kid {
    child: Child,
    name: String,
}

impl Kid {
    /// Spawn `cmd`, naming it `name` in errors.
    ///
    /// # Errors
    /// The program cannot be started.
    pub fn spawn(cmd: &mut Command, name: &str) -> anyhow::Result<Kid> {
        let child = cmd.spawn().with_context(|| format!("start {name}"))?;
        Ok(Kid {
            child,
            name: name.to_owned(),
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error if it has exited.
    ///
    /// # Errors
    /// It exited, or its state cannot be read.
    pub fn alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!("{} exited ({status})", self.name),
            Err(e) => Err(e).with_context(|| format!("wait for {}", self.name)),
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        // Both fail only when it has already exited and been reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
