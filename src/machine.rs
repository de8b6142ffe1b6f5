//! Facts about the machine a lab ran on, from sysinfo.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub host: String,
    pub cpu: String,
    pub cpu_mhz: u64,
    /// Logical CPUs.
    pub cores: usize,
    pub physical_cores: Option<usize>,
    pub memory_bytes: u64,
    pub os: String,
    pub kernel: String,
    /// Load average (1, 5, 15 min) when the lab started and ended; real clock only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_start: Option<[f64; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_end: Option<[f64; 3]>,
}

impl Machine {
    /// Read this machine's static facts.
    pub fn this() -> Machine {
        use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};
        let sys = System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing().with_frequency())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        )
        .ok();
        let (cpu, cpu_mhz, cores, memory_bytes) = match &sys {
            Some(sys) => {
                let first = sys.cpus().first();
                (
                    first.map_or_else(String::new, |c| c.brand().trim().to_string()),
                    first.map_or(0, |c| c.frequency()),
                    sys.cpus().len(),
                    sys.total_memory(),
                )
            }
            None => (String::new(), 0, 0, 0),
        };
        let unknown =
            |r: Result<String, _>| r.unwrap_or_else(|_: sysinfo::Error| "unknown".to_string());
        Machine {
            host: unknown(System::host_name()),
            cpu: if cpu.is_empty() {
                "unknown CPU".into()
            } else {
                cpu
            },
            cpu_mhz,
            cores: if cores == 0 {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            } else {
                cores
            },
            physical_cores: System::physical_core_count().ok(),
            memory_bytes,
            os: unknown(System::long_os_version()),
            kernel: unknown(System::kernel_version()),
            load_start: None,
            load_end: None,
        }
    }

    /// The load average now, if the OS reports one.
    pub fn load_now() -> Option<[f64; 3]> {
        let l = sysinfo::System::load_average().ok()?;
        Some([l.one, l.five, l.fifteen])
    }

    /// One line for a report header.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} cores, {:.1} GiB), {}, kernel {}, host {}",
            self.cpu,
            self.cores,
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            self.os,
            self.kernel,
            self.host
        )
    }
}

/// This process's peak resident memory so far, in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: getrusage fills the struct we hand it and nothing else.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
            return None;
        }
        let max = usage.ru_maxrss as f64;
        // Linux reports kilobytes, macOS bytes.
        let bytes = if cfg!(target_os = "macos") {
            max
        } else {
            max * 1024.0
        };
        Some(bytes / (1u64 << 20) as f64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// What else used the CPUs while a lab ran: read from `/proc/stat` (Linux)
/// and `getrusage` at both ends of the lab.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSample {
    /// `/proc/stat`'s first line: all CPUs' busy, steal and total ticks.
    busy_ticks: Option<u64>,
    steal_ticks: Option<u64>,
    total_ticks: Option<u64>,
    /// The lab's CPU time (user + system), in seconds: this process's, and
    /// that of every process it started, living or ended.
    own_cpu_s: f64,
    involuntary_switches: u64,
    wall: std::time::Instant,
}

/// The harness error's likely causes over a lab, measured, not guessed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Causes {
    /// Share of all CPUs' time the hypervisor gave to other guests (Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_pct: Option<f64>,
    /// Share of all CPUs' time that other processes kept busy (Linux): not
    /// this one nor those it started (a lab's queue server and worker
    /// processes are the lab).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others_cpu_pct: Option<f64>,
    /// Times the kernel took the CPU from this process, per second of lab.
    pub involuntary_switches_per_s: f64,
}

impl CpuSample {
    pub fn now() -> CpuSample {
        let stat = std::fs::read_to_string("/proc/stat").ok();
        let ticks: Option<Vec<u64>> = stat.as_deref().and_then(|s| {
            let line = s.lines().next()?.strip_prefix("cpu ")?;
            line.split_whitespace().map(|v| v.parse().ok()).collect()
        });
        let (busy, steal, total) = match ticks.as_deref() {
            // user nice system idle iowait irq softirq steal …
            Some([user, nice, system, idle, iowait, irq, softirq, steal, ..]) => (
                Some(user + nice + system + irq + softirq),
                Some(*steal),
                Some(user + nice + system + idle + iowait + irq + softirq + steal),
            ),
            _ => (None, None, None),
        };
        let (own_cpu_s, involuntary_switches) = own_usage();
        let own_cpu_s = own_cpu_s + descendants_cpu_s(std::process::id(), false).unwrap_or(0.0);
        CpuSample {
            busy_ticks: busy,
            steal_ticks: steal,
            total_ticks: total,
            own_cpu_s,
            involuntary_switches,
            wall: std::time::Instant::now(),
        }
    }

    /// What happened between `start` and now.
    pub fn causes_since(start: &CpuSample) -> Causes {
        let end = CpuSample::now();
        let wall_s = end.wall.duration_since(start.wall).as_secs_f64().max(1e-9);
        let ticks = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?) as f64);
        let total = ticks(start.total_ticks, end.total_ticks).filter(|t| *t > 0.0);
        let steal = ticks(start.steal_ticks, end.steal_ticks);
        let busy = ticks(start.busy_ticks, end.busy_ticks);
        // /proc/stat counts in USER_HZ, 100 a second on Linux.
        let own_ticks = (end.own_cpu_s - start.own_cpu_s) * 100.0;
        Causes {
            steal_pct: total.zip(steal).map(|(t, s)| s / t * 100.0),
            others_cpu_pct: total
                .zip(busy)
                .map(|(t, b)| ((b - own_ticks) / t * 100.0).max(0.0)),
            involuntary_switches_per_s: end
                .involuntary_switches
                .saturating_sub(start.involuntary_switches)
                as f64
                / wall_s,
        }
    }
}

/// The CPU time in seconds of this process and of its children that have
/// ended (and theirs, where they waited for them), and this process's
/// involuntary context switches.
fn own_usage() -> (f64, u64) {
    #[cfg(unix)]
    {
        let usage = |who| {
            // SAFETY: getrusage fills the struct we hand it and nothing else.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            (unsafe { libc::getrusage(who, &mut usage) } == 0).then_some(usage)
        };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let cpu = |u: &libc::rusage| secs(u.ru_utime) + secs(u.ru_stime);
        let Some(me) = usage(libc::RUSAGE_SELF) else {
            return (0.0, 0);
        };
        let ended = usage(libc::RUSAGE_CHILDREN).map_or(0.0, |u| cpu(&u));
        (cpu(&me) + ended, me.ru_nivcsw.max(0) as u64)
    }
    #[cfg(not(unix))]
    {
        (0.0, 0)
    }
}

/// CPU seconds of the living processes descended from `root` (with
/// `with_root`, of `root` too), each with its own children that have ended
/// (Linux's /proc: utime, stime, cutime, cstime; `None` elsewhere or where
/// `root` is gone).
pub fn descendants_cpu_s(root: u32, with_root: bool) -> Option<f64> {
    ProcessTree::read()?.cpu_s(root, with_root)
}

/// Every process's parent and CPU ticks, read from /proc at once, for the
/// CPU of several trees from one look.
pub struct ProcessTree {
    /// pid -> (parent, ticks).
    procs: std::collections::HashMap<u32, (u32, u64)>,
    children: std::collections::HashMap<u32, Vec<u32>>,
}

impl ProcessTree {
    /// The processes now (`None` without /proc).
    pub fn read() -> Option<ProcessTree> {
        let mut procs = std::collections::HashMap::<u32, (u32, u64)>::new();
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(fields) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat_fields(&stat))
            {
                procs.insert(pid, fields);
            }
        }
        let mut children = std::collections::HashMap::<u32, Vec<u32>>::new();
        for (&pid, &(parent, _)) in &procs {
            children.entry(parent).or_default().push(pid);
        }
        Some(ProcessTree { procs, children })
    }

    /// As [`descendants_cpu_s`], from this look.
    pub fn cpu_s(&self, root: u32, with_root: bool) -> Option<f64> {
        let mut total = if with_root {
            self.procs.get(&root)?.1
        } else {
            0
        };
        let mut todo = vec![root];
        while let Some(p) = todo.pop() {
            for &c in self.children.get(&p).into_iter().flatten() {
                total += self.procs[&c].1;
                todo.push(c);
            }
        }
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        Some(total as f64 / hz)
    }
}

/// A `/proc/<pid>/stat` line's parent and its CPU ticks (utime, stime,
/// cutime, cstime: fields 4 and 14 to 17).
fn stat_fields(stat: &str) -> Option<(u32, u64)> {
    // Fields after the command's closing parenthesis, from field 3.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |k: usize| f.get(k - 3)?.parse::<u64>().ok();
    let ticks = [14, 15, 16, 17]
        .iter()
        .map(|&k| field(k))
        .sum::<Option<u64>>()?;
    Some((u32::try_from(field(4)?).ok()?, ticks))
}

/// What the kernel says of one thread at an instant: the counters a late
/// wake is explained by (Linux: `/proc/thread-self/schedstat`,
/// `getrusage(RUSAGE_THREAD)`, `/proc/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadSample {
    /// When it was taken, in the caller's time base (lab nanoseconds).
    pub at_ns: u64,
    /// CPU time the thread has run (`CLOCK_THREAD_CPUTIME_ID`, the kernel's
    /// task clock: time stolen by the hypervisor and, where accounted,
    /// interrupts are not in it).
    pub exec_ns: u64,
    /// Time the thread has waited runnable on a run queue while other tasks
    /// of this kernel had its CPU.
    pub run_delay_ns: u64,
    /// Times the kernel took the CPU from the thread.
    pub involuntary_switches: u64,
    /// Steal ticks (USER_HZ) of the CPU the thread is on, and which.
    pub cpu: Option<usize>,
    pub cpu_steal_ticks: Option<u64>,
}

/// `/proc/<pid>/task/<tid>/schedstat`: run time, run-queue wait (both ns),
/// time slices.
pub fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

/// The steal ticks of CPU `cpu` in a `/proc/stat` text.
pub fn parse_cpu_steal(stat: &str, cpu: usize) -> Option<u64> {
    let name = format!("cpu{cpu} ");
    let line = stat.lines().find(|l| l.starts_with(&name))?;
    // cpuN user nice system idle iowait irq softirq steal …
    line.split_whitespace().nth(8)?.parse().ok()
}

/// The open files a [`ThreadSample`] is read from, for the thread that
/// opened them; `None` where the OS has no such files (not Linux).
#[derive(Debug)]
pub struct ThreadProbe {
    schedstat: std::fs::File,
    stat: Option<std::fs::File>,
    buf: Vec<u8>,
}

impl ThreadProbe {
    /// Open the calling thread's counters (sample from that thread only).
    pub fn open() -> Option<ThreadProbe> {
        if !cfg!(target_os = "linux") {
            return None;
        }
        Some(ThreadProbe {
            schedstat: std::fs::File::open("/proc/thread-self/schedstat").ok()?,
            stat: std::fs::File::open("/proc/stat").ok(),
            buf: Vec::with_capacity(4096),
        })
    }

    /// The counters now, stamped `at_ns`. A few microseconds: two reads of
    /// kept-open files and one `getrusage`.
    pub fn sample(&mut self, at_ns: u64) -> ThreadSample {
        // The run time from the thread's CPU clock, which brings the running
        // task's up to date (schedstat's lags by up to a scheduler tick);
        // the run-queue wait from schedstat, complete for a running thread.
        let run_delay_ns = read_at(&self.schedstat, &mut self.buf)
            .and_then(parse_schedstat)
            .map_or(0, |(_, delay)| delay);
        let exec_ns = thread_cpu_ns();
        let cpu = current_cpu();
        let cpu_steal_ticks = match (&self.stat, cpu) {
            (Some(stat), Some(cpu)) => {
                read_at(stat, &mut self.buf).and_then(|s| parse_cpu_steal(s, cpu))
            }
            _ => None,
        };
        ThreadSample {
            at_ns,
            exec_ns,
            run_delay_ns,
            involuntary_switches: thread_involuntary_switches(),
            cpu,
            cpu_steal_ticks,
        }
    }
}

/// The first 4 KiB of a kept-open `/proc` file (one read: `/proc/stat`'s
/// per-CPU lines come first, its long interrupt lines are not needed).
fn read_at<'b>(file: &std::fs::File, buf: &'b mut Vec<u8>) -> Option<&'b str> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        buf.resize(4096, 0);
        let n = file.read_at(buf, 0).ok()?;
        // A cut-off last line is dropped by the parsers' field counts.
        let text = &buf[..n];
        let end = text.iter().rposition(|b| *b == b'\n').map_or(n, |i| i + 1);
        std::str::from_utf8(&text[..end]).ok()
    }
    #[cfg(not(unix))]
    {
        let _ = (file, buf);
        None
    }
}

fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes nothing and returns a number or -1.
        let cpu = unsafe { libc::sched_getcpu() };
        (cpu >= 0).then_some(cpu as usize)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The calling thread's CPU time in nanoseconds (the kernel's task clock).
fn thread_cpu_ns() -> u64 {
    #[cfg(unix)]
    {
        // SAFETY: clock_gettime fills the timespec we hand it.
        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
            return 0;
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// The calling thread's involuntary context switches (Linux), else 0.
fn thread_involuntary_switches() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage fills the struct we hand it and nothing else.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
            return 0;
        }
        usage.ru_nivcsw.max(0) as u64
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::{Command, Stdio};

    /// A shell loop of a fixed amount of work (about 0.4 s of one CPU here):
    /// the same CPU time however busy the machine is.
    const BURN: &str = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done";

    /// CPU seconds of this process's children that have ended.
    fn ended_children_cpu_s() -> f64 {
        // SAFETY: getrusage fills the struct we hand it and nothing else.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) }, 0);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(u.ru_utime) + secs(u.ru_stime)
    }

    #[test]
    fn processes_the_lab_started_are_the_lab_and_the_rest_are_others() {
        let start = CpuSample::now();
        let (wall, before) = (std::time::Instant::now(), ended_children_cpu_s());
        // The same work twice: in a child this process waits for (as a
        // lab's server or worker process), and in one handed to init at
        // once (its shell exits, leaving it running: another process).
        let mut mine = Command::new("sh").args(["-c", BURN]).spawn().unwrap();
        let mut shell = Command::new("sh")
            .args(["-c", &format!("( {BURN} ) > /dev/null 2>&1 & echo $!")])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pid = String::new();
        shell
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut pid)
            .unwrap();
        shell.wait().unwrap();
        let pid: u32 = pid.trim().parse().unwrap();
        // The adopted one is no descendant of this process.
        let theirs = descendants_cpu_s(std::process::id(), false);
        mine.wait().unwrap();
        let deadline = wall + std::time::Duration::from_secs(20);
        // Until it ends (a zombie, state Z, has: init may be slow to reap).
        let running = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, r)| !r.starts_with('Z'))
            })
        };
        while running() {
            assert!(
                std::time::Instant::now() < deadline,
                "the adopted loop ends"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let causes = CpuSample::causes_since(&start);
        let others = causes.others_cpu_pct.expect("Linux's /proc/stat");
        // Other processes' share is the adopted loop's CPU (as much as
        // the child's) over every CPU's time; counting the child too would
        // double it.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let one =
            (ended_children_cpu_s() - before) / (wall.elapsed().as_secs_f64() * cores) * 100.0;
        assert!(
            others > one * 0.5 && others < one * 1.5 + 2.0,
            "others {others:.1} %, one loop {one:.1} % ({cores} cores)"
        );
        assert!(theirs.is_some());
    }
}
