//! A PostgreSQL cluster of the lab's own: `initdb` into a temp folder and
//! `postgres` on a free loopback port (trust authentication, loopback
//! only; as root, both run as the `postgres` system user, which PostgreSQL
//! requires), `pg_stat_statements` loaded where the installation has it;
//! stopped when dropped (success, error or Ctrl-C alike), and told to stop
//! with noisylab if noisylab is killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::backend::process::{die_with_parent, free_port, on_path};

/// The message for a machine without the server's binaries.
pub const NOT_INSTALLED: &str = "PostgreSQL's initdb and postgres are not on PATH nor under \
     /usr/lib/postgresql/*/bin: install them (Debian and Ubuntu: `apt-get install postgresql`; \
     macOS: `brew install postgresql@15`), or give a database with --backend postgres://USER@HOST:PORT/DB";

/// The role the lab's own cluster is made with.
pub const USER: &str = "noisylab";

/// How long a new cluster may take to answer.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// What the lab's own cluster promises across a restart.
pub const PROMISE: &str = "PostgreSQL writes each commit to its write-ahead log before it \
     replies (synchronous_commit on), so a crash of the server loses no job it acknowledged \
     (fsync off risks that only on a crash of the machine)";

/// What it promises for an unlogged job table.
pub const NO_PROMISE: &str = "PostgreSQL empties an unlogged table after a crash of the \
     server, so a restart loses every job in it";

/// A running cluster that this process made and started.
#[derive(Debug)]
pub struct OwnedCluster {
    child: Child,
    dir: PathBuf,
    /// `postgres`, its command line and who runs it (to start it again).
    exe: PathBuf,
    args: Vec<String>,
    ids: Option<(u32, u32)>,
    pub url: String,
    /// Whether `pg_stat_statements` is loaded.
    pub statements: bool,
}

/// The folder holding `initdb` and `postgres`: on PATH, else the newest
/// of the distribution's `/usr/lib/postgresql/*/bin`.
pub fn binaries() -> Option<PathBuf> {
    if let (Some(initdb), Some(_)) = (on_path("initdb"), on_path("postgres")) {
        // Through a link to the installation (its lib/ beside bin/).
        let initdb = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        return initdb.parent().map(Path::to_path_buf);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// As root: the `postgres` system user's ids (PostgreSQL refuses to run as
/// root).
fn run_as() -> Result<Option<(u32, u32)>> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Ok(None);
    }
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: a valid C string; the result is read at once, before any
    // other getpw* call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        bail!(
            "PostgreSQL will not run as root and there is no `postgres` system user to run it as \
             (the distribution's postgresql package makes one)"
        );
    }
    // SAFETY: non-null, from getpwnam just above.
    Ok(Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) }))
}

fn command(exe: &Path, ids: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(exe);
    if let Some((uid, gid)) = ids {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// What a cluster of the lab's own writes to disk before a commit
/// replies: both on by default; each off trades durability for speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// Sync the write-ahead log to disk (off: a crash of the machine may
    /// lose or corrupt data).
    pub fsync: bool,
    /// A commit replies once its record is flushed (off: a crash of the
    /// server may lose the last commits it acknowledged, never its
    /// consistency).
    pub synchronous_commit: bool,
}

impl Durability {
    /// Both on, as PostgreSQL's defaults.
    pub const FULL: Durability = Durability {
        fsync: true,
        synchronous_commit: true,
    };
    /// `fsync` off, commits still flushed before they reply.
    pub const NO_FSYNC: Durability = Durability {
        fsync: false,
        synchronous_commit: true,
    };
}

impl OwnedCluster {
    /// A new cluster with `durability`'s settings.
    pub fn start(durability: Durability) -> Result<OwnedCluster> {
        let Some(bin) = binaries() else {
            bail!(NOT_INSTALLED);
        };
        let ids = run_as()?;
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!("noisylab-pg-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let chown = |p: &Path| -> Result<()> {
            if let Some((uid, gid)) = ids {
                std::os::unix::fs::chown(p, Some(uid), Some(gid))
                    .with_context(|| format!("cannot give {} to the postgres user", p.display()))?;
            }
            Ok(())
        };
        chown(&dir)?;
        let data = dir.join("data");
        let out = command(&bin.join("initdb"), ids)
            .arg("-D")
            .arg(&data)
            .args(["-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()
            .with_context(|| format!("cannot run {}", bin.join("initdb").display()))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let last = text
                .lines()
                .last()
                .unwrap_or("no output")
                .trim()
                .to_string();
            let _ = std::fs::remove_dir_all(&dir);
            bail!("initdb failed ({}): {last}", out.status);
        }
        let statements = bin
            .parent()
            .is_some_and(|p| p.join("lib/pg_stat_statements.so").is_file());
        let log = dir.join("postgres.log");
        std::fs::File::create(&log)?;
        chown(&log)?;
        let mut args: Vec<String> = vec!["-D".into(), data.display().to_string()];
        let mut set = |setting: String| args.extend(["-c".to_string(), setting]);
        set(format!("port={port}"));
        set("listen_addresses=127.0.0.1".into());
        set(format!("unix_socket_directories={}", dir.display()));
        let on = |b: bool| if b { "on" } else { "off" };
        set(format!("fsync={}", on(durability.fsync)));
        set(format!(
            "synchronous_commit={}",
            on(durability.synchronous_commit)
        ));
        set("max_connections=300".into());
        // A queue's rows churn: vacuum its tables as they ask, not once a
        // minute (their own thresholds are in the schema).
        set("autovacuum_naptime=1s".into());
        if statements {
            set("shared_preload_libraries=pg_stat_statements".into());
        }
        let exe = bin.join("postgres");
        let child = spawn(&exe, &args, ids, &log)?;
        let mut cluster = OwnedCluster {
            child,
            dir,
            exe,
            args,
            ids,
            url: format!("postgres://{USER}@127.0.0.1:{port}/postgres"),
            statements,
        };
        cluster.wait_ready()?;
        Ok(cluster)
    }

    /// Stop the server as a crash would (an immediate shutdown: every
    /// server process quits at once, nothing written on the way out) and,
    /// after `down`, start it again on its port and folder: it replays its
    /// write-ahead log first.
    pub fn restart(&mut self, down: Duration) -> Result<()> {
        // SAFETY: a plain signal to our own child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGQUIT);
        }
        let deadline = Instant::now() + START_DEADLINE;
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                bail!(
                    "postgres did not stop within {} s of SIGQUIT",
                    START_DEADLINE.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(down);
        self.child = spawn(&self.exe, &self.args, self.ids, &self.log())?;
        self.wait_ready()
            .context("postgres did not come back after its restart")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// Until the server accepts a connection; its log's last line if it
    /// exits.
    fn wait_ready(&mut self) -> Result<()> {
        let log = self.log();
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if postgres::Client::connect(&self.url, postgres::NoTls).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let last = text.lines().last().unwrap_or("no log").trim();
                bail!("postgres exited at start ({status}): {last}");
            }
            if Instant::now() > deadline {
                bail!(
                    "postgres did not answer on {} within {} s",
                    self.url,
                    START_DEADLINE.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether it syncs its write-ahead log to disk.
    pub fn fsync(&self) -> bool {
        self.args.iter().any(|a| a == "fsync=on")
    }

    /// Whether a commit replies only once its record is flushed.
    pub fn synchronous_commit(&self) -> bool {
        self.args.iter().any(|a| a == "synchronous_commit=on")
    }

    /// The server's process id (the postmaster).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// `postgres` with `args`, as `ids`, its messages appended to `log`.
fn spawn(exe: &Path, args: &[String], ids: Option<(u32, u32)>, log: &Path) -> Result<Child> {
    let log_file = std::fs::OpenOptions::new().append(true).open(log)?;
    let mut cmd = command(exe, ids);
    cmd.args(args).stdout(Stdio::null()).stderr(log_file);
    die_with_parent(&mut cmd);
    cmd.spawn()
        .with_context(|| format!("cannot start {}", exe.display()))
}

impl Drop for OwnedCluster {
    fn drop(&mut self) {
        // SIGINT: fast shutdown (sessions ended, no wait for clients).
        // SAFETY: a plain signal to our own child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// CPU seconds of the cluster's processes so far: the postmaster, its
/// backends now, and those that have exited (Linux's /proc; `None`
/// elsewhere).
pub fn cpu_s(postmaster: u32) -> Option<f64> {
    crate::machine::descendants_cpu_s(postmaster, true)
}
