//! A Redis server of the lab's own: `redis-server` on a free loopback port,
//! in a temp folder, persistence off (or, for a lab that restarts it, an
//! append-only file, `appendfsync always`); stopped when dropped (success,
//! error or Ctrl-C alike), and told to stop with noisylab if noisylab is
//! killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::backend::process::{die_with_parent, free_port, on_path};

/// The message for a machine without the server.
pub const NOT_INSTALLED: &str = "redis-server is not on PATH: install it (Debian and Ubuntu: \
     `apt-get install redis-server`; macOS: `brew install redis`), or give a server with \
     --backend redis://HOST:PORT";

/// How long a new server may take to answer.
const START_DEADLINE: Duration = Duration::from_secs(10);

/// What a server started with an append-only file promises across a
/// restart.
pub const PROMISE: &str = "Redis with appendonly yes and appendfsync always writes and syncs \
     every change to its file before it replies, so a crash loses nothing it acknowledged";

/// What a server without one promises.
pub const NO_PROMISE: &str = "Redis without an append-only file keeps its jobs in memory \
     only, so a crash loses every one of them";

/// A running server that this process started.
#[derive(Debug)]
pub struct OwnedServer {
    child: Child,
    exe: PathBuf,
    port: u16,
    dir: PathBuf,
    /// Keeps an append-only file (to be restarted from it).
    persist: bool,
    pub url: String,
}

impl OwnedServer {
    /// A server with persistence off, or with `persist` an append-only file.
    pub fn start(persist: bool) -> Result<OwnedServer> {
        let Some(exe) = on_path("redis-server") else {
            bail!(NOT_INSTALLED);
        };
        let port = free_port()?;
        let dir =
            std::env::temp_dir().join(format!("noisylab-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let child = spawn(&exe, port, &dir, persist)?;
        let mut server = OwnedServer {
            child,
            exe,
            port,
            dir,
            persist,
            url: format!("redis://127.0.0.1:{port}/"),
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Kill the server (SIGKILL: a crash, nothing flushed on the way out)
    /// and, after `down`, start it again on its port and folder, from its
    /// append-only file; without one it comes back empty, as a crash
    /// leaves it (what the lab's check of its jobs then finds).
    pub fn restart(&mut self, down: Duration) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(down);
        self.child = spawn(&self.exe, self.port, &self.dir, self.persist)?;
        self.wait_ready()
            .context("redis-server did not come back after its restart")
    }

    /// Until the server answers PING (a server loading its file answers
    /// LOADING); its log's last line if it exits.
    fn wait_ready(&mut self) -> Result<()> {
        let log = self.dir.join("redis.log");
        let client = ::redis::Client::open(self.url.as_str())?;
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Ok(mut con) = client.get_connection()
                && ::redis::cmd("PING").query::<String>(&mut con).is_ok()
            {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let last = text.lines().last().unwrap_or("no log").trim();
                bail!("redis-server exited at start ({status}): {last}");
            }
            if Instant::now() > deadline {
                bail!(
                    "redis-server did not answer on {} within {} s",
                    self.url,
                    START_DEADLINE.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether it keeps an append-only file.
    pub fn persists(&self) -> bool {
        self.persist
    }

    /// The server's process id (for tests that stop it from outside).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its folder (its log; its append-only file where it persists),
    /// removed when it is dropped.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `redis-server` on `port` in `dir`, persistence off or (`persist`) an
/// append-only file.
fn spawn(exe: &Path, port: u16, dir: &Path, persist: bool) -> Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--daemonize", "no", "--loglevel", "warning"])
        .args(["--appendonly", if persist { "yes" } else { "no" }])
        .args(["--appendfsync", "always"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    die_with_parent(&mut cmd);
    cmd.spawn()
        .with_context(|| format!("cannot start {}", exe.display()))
}

impl Drop for OwnedServer {
    fn drop(&mut self) {
        // SIGTERM lets it exit cleanly (no save: persistence is off).
        // SAFETY: a plain signal to our own child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
