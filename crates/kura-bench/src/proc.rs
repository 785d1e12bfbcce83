//! Memory and CPU time of a process from /proc: VmRSS and VmHWM (the peak) from
//! `status`, utime+stime from `stat`, and a sampler for the peak RSS of a process
//! whose VmHWM covers more than the run (the shared apiserver).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub cpu_ticks: u64,
}

pub fn read(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces:
    // state is field 3, utime 14 and stime 15.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| rest.get(i - 3).and_then(|v| v.parse::<u64>().ok());
    Some(Sample {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
        cpu_ticks: ticks(14)? + ticks(15)?,
    })
}

/// Clock ticks per second of /proc/<pid>/stat (`getconf CLK_TCK`; 100 on Linux).
pub fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}

pub fn cpu_seconds(from: Sample, to: Sample) -> f64 {
    to.cpu_ticks.saturating_sub(from.cpu_ticks) as f64 / ticks_per_second()
}

pub fn mib(kib: u64) -> f64 {
    (kib as f64 / 1024.0 * 10.0).round() / 10.0
}

/// Samples the RSS of some processes every 200 ms and keeps the highest.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    peaks: Arc<Mutex<HashMap<u32, u64>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    pub fn start(pids: Vec<u32>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peaks: Arc<Mutex<HashMap<u32, u64>>> = Arc::default();
        let (s, p) = (stop.clone(), peaks.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for &pid in &pids {
                    if let Some(sample) = read(pid) {
                        let mut peaks = p.lock().unwrap();
                        let peak = peaks.entry(pid).or_default();
                        *peak = (*peak).max(sample.rss_kib);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Sampler {
            stop,
            peaks,
            thread: Some(thread),
        }
    }

    pub fn peak_kib(&self, pid: u32) -> u64 {
        self.peaks.lock().unwrap().get(&pid).copied().unwrap_or(0)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A duration in seconds, to the millisecond (as the report shows them).
pub fn secs(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}
