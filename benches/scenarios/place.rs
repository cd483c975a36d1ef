//! Where the client and the servers run (the two views), and the CPU time
//! each of them used.

use std::fmt;
use std::io;
use std::time::{Duration, Instant};

/// A placement of the bench process and of every `redis-server` it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Client on one CPU, servers on another: latency, the wake-up from one
    /// CPU to the other included.
    Split { client: usize, server: usize },
    /// Client and servers on one CPU: each cycle's figures are the CPU it
    /// costs, since nothing runs while another part waits.
    Same { cpu: usize },
    /// No pinning at all (`--no-pin`).
    Unpinned,
}

impl View {
    pub fn client_cpu(self) -> Option<usize> {
        match self {
            View::Split { client, .. } => Some(client),
            View::Same { cpu } => Some(cpu),
            View::Unpinned => None,
        }
    }

    pub fn server_cpu(self) -> Option<usize> {
        match self {
            View::Split { server, .. } => Some(server),
            View::Same { cpu } => Some(cpu),
            View::Unpinned => None,
        }
    }

    /// A few words for chart legends and table titles.
    pub fn short(self) -> &'static str {
        match self {
            View::Split { .. } => "split CPUs",
            View::Same { .. } => "same CPU",
            View::Unpinned => "not pinned",
        }
    }
}

impl View {
    /// The title of this view's panel in the chart.
    pub fn panel(self) -> String {
        match self {
            View::Split { client, server } => {
                format!("split: client on CPU {client}, servers on CPU {server}")
            }
            View::Same { cpu } => format!("same CPU: client and servers on CPU {cpu}"),
            View::Unpinned => "not pinned".to_owned(),
        }
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            View::Split { client, server } => write!(
                f,
                "split view: client pinned to CPU {client}, servers to CPU {server} (latency)"
            ),
            View::Same { cpu } => write!(
                f,
                "same-CPU view: client and servers pinned to CPU {cpu} (CPU per operation)"
            ),
            View::Unpinned => write!(f, "not pinned: the scheduler places client and servers"),
        }
    }
}

fn cpu_set(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set; CPU_SET only sets a
    // bit in it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    }
}

fn set_affinity(tid: libc::pid_t, cpu: usize) -> io::Result<()> {
    let set = cpu_set(cpu);
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed.
    if unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restricts the calling thread (and the threads it starts later) to `cpu`,
/// as `taskset -c cpu` does.
pub fn pin_this_thread(cpu: usize) -> io::Result<()> {
    set_affinity(0, cpu)
}

/// Restricts every thread of process `pid` to `cpu` (`taskset -a -p`).
pub fn pin_process(pid: u32, cpu: usize) -> io::Result<()> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid = task?.file_name().to_string_lossy().parse::<libc::pid_t>();
        if let Ok(tid) = tid {
            set_affinity(tid, cpu)?;
        }
    }
    Ok(())
}

/// User + system CPU time of this process, all threads: what `/proc/self/stat`
/// reports as utime + stime, read from the process CPU clock in nanoseconds
/// rather than in 10 ms ticks.
pub fn cpu_time_self() -> Duration {
    read_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// User + system CPU time of process `pid`, all threads (its process CPU
/// clock; `Duration::ZERO` if it has gone).
pub fn cpu_time_of(pid: u32) -> Duration {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid place for the clock id.
    if unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) } != 0 {
        return Duration::ZERO;
    }
    read_clock(clock)
}

fn read_clock(clock: libc::clockid_t) -> Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid `timespec` to write to.
    if unsafe { libc::clock_gettime(clock, &mut time) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
}

/// Wall time, this process's CPU time and the servers' CPU time over a
/// stretch of the run.
pub struct Meter<'a> {
    servers: &'a [u32],
    wall: Instant,
    client: Duration,
    server: Duration,
}

/// What a [`Meter`] measured.
#[derive(Clone, Copy, Default)]
pub struct Used {
    pub wall: Duration,
    pub client: Duration,
    pub server: Duration,
}

impl std::ops::AddAssign for Used {
    fn add_assign(&mut self, other: Used) {
        self.wall += other.wall;
        self.client += other.client;
        self.server += other.server;
    }
}

impl<'a> Meter<'a> {
    /// Starts measuring; `servers` are the pids whose CPU time counts as the
    /// server's.
    pub fn start(servers: &'a [u32]) -> Self {
        Meter {
            servers,
            server: servers.iter().map(|&pid| cpu_time_of(pid)).sum(),
            client: cpu_time_self(),
            wall: Instant::now(),
        }
    }

    pub fn stop(self) -> Used {
        let wall = self.wall.elapsed();
        let client = cpu_time_self().saturating_sub(self.client);
        let server = self
            .servers
            .iter()
            .map(|&pid| cpu_time_of(pid))
            .sum::<Duration>()
            .saturating_sub(self.server);
        Used {
            wall,
            client,
            server,
        }
    }
}

/// The 1-minute load average, from `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}
