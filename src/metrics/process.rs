//! Prometheus' standard process families (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
//! `process_open_fds`, `process_max_fds`, `process_start_time_seconds`), with
//! the names, types and units of the Go and Java clients' process collectors,
//! so that dashboards of a controller's resources (kubebuilder's) show this
//! operator. Read from `/proc/self` at each scrape; where there is no `/proc`
//! (not Linux) or a file cannot be read, its families are left out rather than
//! reported as zero.

use std::path::Path;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The Linux ABI's default `USER_HZ` and page size, for a kernel whose
/// auxiliary vector does not say.
const DEFAULT_CLOCK_TICKS: u64 = 100;
const DEFAULT_PAGE_SIZE: u64 = 4096;
/// Keys of the auxiliary vector (`<elf.h>`).
const AT_PAGESZ: u64 = 6;
const AT_CLKTCK: u64 = 17;

/// The fields of `/proc/<pid>/stat` the families need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// User and system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    /// Start, in clock ticks since boot.
    pub start_ticks: u64,
    pub virtual_bytes: u64,
    pub resident_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and
/// may itself hold spaces and parentheses, so fields are counted from the last
/// `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is index 0 here.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The soft limit of open files from `/proc/<pid>/limits`; None when
/// unlimited or absent.
pub fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The boot time (seconds since the epoch) from `/proc/stat`.
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// `(clock ticks per second, page size)` from `/proc/<pid>/auxv` (native-endian
/// key/value pairs of machine words), where the kernel hands them to every
/// process; the ABI defaults where it does not say.
pub fn parse_auxv(bytes: &[u8]) -> (u64, u64) {
    const WORD: usize = std::mem::size_of::<usize>();
    let mut ticks = DEFAULT_CLOCK_TICKS;
    let mut page = DEFAULT_PAGE_SIZE;
    let words: Vec<u64> = bytes
        .chunks_exact(WORD)
        .map(|w| {
            let mut b = [0u8; WORD];
            b.copy_from_slice(w);
            usize::from_ne_bytes(b) as u64
        })
        .collect();
    for pair in words.chunks_exact(2) {
        match (pair[0], pair[1]) {
            (AT_CLKTCK, v) if v > 0 => ticks = v,
            (AT_PAGESZ, v) if v > 0 => page = v,
            _ => {}
        }
    }
    (ticks, page)
}

/// One scrape's values; each None when its source could not be read.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Sample {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

/// The sample of the process whose `/proc` directory is `proc_dir`
/// (`/proc/self`); `proc_root` is where `stat` (the boot time) is.
pub fn sample(proc_dir: &Path, proc_root: &Path) -> Sample {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let (ticks, page) = std::fs::read(proc_dir.join("auxv"))
        .map(|b| parse_auxv(&b))
        .unwrap_or((DEFAULT_CLOCK_TICKS, DEFAULT_PAGE_SIZE));
    let stat = read(&proc_dir.join("stat")).and_then(|t| parse_stat(&t));
    let boot = read(&proc_root.join("stat")).and_then(|t| parse_boot_time(&t));
    Sample {
        cpu_seconds: stat.map(|s| s.cpu_ticks as f64 / ticks as f64),
        resident_bytes: stat.map(|s| s.resident_pages * page),
        virtual_bytes: stat.map(|s| s.virtual_bytes),
        open_fds: std::fs::read_dir(proc_dir.join("fd"))
            .ok()
            .map(|d| d.count() as u64),
        max_fds: read(&proc_dir.join("limits")).and_then(|t| parse_max_open_files(&t)),
        start_time_seconds: stat
            .zip(boot)
            .map(|(s, b)| b as f64 + s.start_ticks as f64 / ticks as f64),
    }
}

/// The collector of this process's families, registered in the unprefixed
/// registry (`metrics::runtime`).
#[derive(Debug, Default)]
pub struct ProcessCollector;

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    let Some(value) = value else { return Ok(()) };
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = sample(Path::new("/proc/self"), Path::new("/proc"));
        if let Some(cpu) = s.cpu_seconds {
            let metric = ConstCounter::new(cpu);
            // The encoder appends `_total` to a counter's name.
            metric.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                metric.metric_type(),
            )?)?;
        }
        let e = &mut encoder;
        let bytes = |v: Option<u64>| v.map(|v| v as f64);
        gauge(
            e,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            bytes(s.resident_bytes),
        )?;
        gauge(
            e,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            bytes(s.virtual_bytes),
        )?;
        gauge(
            e,
            "process_open_fds",
            "Number of open file descriptors.",
            bytes(s.open_fds),
        )?;
        gauge(
            e,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            bytes(s.max_fds),
        )?;
        gauge(
            e,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis of its own.
        let text = "42 (a) b) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 7 0 12345 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                cpu_ticks: 300,
                start_ticks: 12345,
                virtual_bytes: 104_857_600,
                resident_pages: 2560,
            })
        );
        assert_eq!(parse_stat("42 (truncated) S 1"), None);
    }

    #[test]
    fn limits_give_the_soft_open_files_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             63471                63471                processes \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_open_files(text), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files     \n";
        assert_eq!(parse_max_open_files(unlimited), None);
    }

    #[test]
    fn boot_time_and_auxv() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        let words: Vec<u8> = [AT_PAGESZ, 16384, AT_CLKTCK, 250, 0, 0]
            .iter()
            .flat_map(|w| (*w as usize).to_ne_bytes())
            .collect();
        assert_eq!(parse_auxv(&words), (250, 16384));
        assert_eq!(parse_auxv(&[]), (DEFAULT_CLOCK_TICKS, DEFAULT_PAGE_SIZE));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_sampled_from_proc() {
        let s = sample(Path::new("/proc/self"), Path::new("/proc"));
        let rss = s.resident_bytes.unwrap();
        let vsz = s.virtual_bytes.unwrap();
        assert!(rss > 1 << 20 && rss <= vsz, "rss {rss}, vsz {vsz}");
        assert!(s.open_fds.unwrap() >= 3);
        assert!(s.max_fds.unwrap() >= s.open_fds.unwrap());
        assert!(s.cpu_seconds.unwrap() >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = s.start_time_seconds.unwrap();
        // Started within the last day and not in the future (the boot time
        // is whole seconds, the start ticks are hundredths).
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} vs {now}"
        );
    }
}
