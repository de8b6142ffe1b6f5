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
