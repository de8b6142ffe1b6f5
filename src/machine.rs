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
    /// This process's CPU time (user + system), in seconds.
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
    /// Share of all CPUs' time that other processes kept busy (Linux).
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

/// This process's CPU time in seconds and its involuntary context switches.
fn own_usage() -> (f64, u64) {
    #[cfg(unix)]
    {
        // SAFETY: getrusage fills the struct we hand it and nothing else.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
            return (0.0, 0);
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        (
            secs(usage.ru_utime) + secs(usage.ru_stime),
            usage.ru_nivcsw.max(0) as u64,
        )
    }
    #[cfg(not(unix))]
    {
        (0.0, 0)
    }
}
