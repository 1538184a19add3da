//! The controller process's own standard series (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, …), named and computed as Prometheus's client libraries
//! do on Linux, so the dashboards and alerts written for every other exporter work on
//! gantry's. Read from `/proc` when scraped; parsing is separate from reading so it is tested
//! on fixed text.

/// Linux's `USER_HZ`: the unit of `/proc/<pid>/stat` times (100 on every architecture
/// Linux builds for user space; Prometheus's `procfs` assumes the same).
const USER_HZ: f64 = 100.0;

/// What one scrape reports of the process; a figure `/proc` did not give is left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub start_time_s: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
}

impl ProcessStats {
    /// This process, now.
    pub fn read() -> ProcessStats {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64);
        ProcessStats { open_fds, ..parse(&stat, &status, &boot, &limits) }
    }

    /// The series as (name, type, help, value), in Prometheus's names and words.
    pub fn series(&self) -> Vec<(&'static str, &'static str, &'static str, f64)> {
        [
            (
                "process_cpu_seconds_total",
                "counter",
                "Total user and system CPU time spent in seconds.",
                self.cpu_seconds,
            ),
            ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", self.resident_bytes),
            ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", self.virtual_bytes),
            (
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                self.start_time_s,
            ),
            ("process_open_fds", "gauge", "Number of open file descriptors.", self.open_fds),
            ("process_max_fds", "gauge", "Maximum number of open file descriptors.", self.max_fds),
        ]
        .into_iter()
        .filter_map(|(name, kind, help, value)| value.map(|v| (name, kind, help, v)))
        .collect()
    }
}

/// The figures in `/proc/self/stat`, `/proc/self/status`, `/proc/stat` and
/// `/proc/self/limits` text.
pub fn parse(stat: &str, status: &str, boot: &str, limits: &str) -> ProcessStats {
    // The command name (field 2) may hold spaces and parentheses: fields are counted from
    // after its last ')'; the first after it is field 3 (state).
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    let cpu_seconds = field(14).zip(field(15)).map(|(user, system)| (user + system) / USER_HZ);
    let btime = boot.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse::<f64>().ok());
    let start_time_s = field(22).zip(btime).map(|(ticks, btime)| btime + ticks / USER_HZ);
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kib| kib * 1024.0)
    };
    let max_fds = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|soft| soft.parse::<f64>().ok());
    ProcessStats {
        cpu_seconds,
        resident_bytes: kib("VmRSS:"),
        virtual_bytes: kib("VmSize:"),
        start_time_s,
        open_fds: None,
        max_fds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_come_from_the_right_fields_even_with_a_strange_command_name() {
        let stat = "4242 (gan (try) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 12345 1000 300 \
                    18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let status = "Name:\tgantry\nVmSize:\t  123456 kB\nVmRSS:\t    2048 kB\n";
        let boot = "cpu  1 2 3\nbtime 1795000000\nprocesses 10\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let p = parse(stat, status, boot, limits);
        assert_eq!(p.cpu_seconds, Some(3.0));
        assert_eq!(p.start_time_s, Some(1_795_000_123.45));
        assert_eq!(p.resident_bytes, Some(2048.0 * 1024.0));
        assert_eq!(p.virtual_bytes, Some(123_456.0 * 1024.0));
        assert_eq!(p.max_fds, Some(1024.0));
        assert_eq!(parse("", "", "", "unlimited"), ProcessStats::default());
    }

    #[test]
    fn this_process_reads_and_only_known_figures_become_series() {
        let p = ProcessStats::read();
        assert!(p.cpu_seconds.is_some() && p.resident_bytes.is_some() && p.open_fds.is_some(), "{p:?}");
        assert_eq!(ProcessStats { max_fds: Some(8.0), ..Default::default() }.series().len(), 1);
    }
}
