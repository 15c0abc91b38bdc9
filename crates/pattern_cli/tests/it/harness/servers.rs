//! `pattern serve` processes, one per slot, each slot on a fixed loopback port chosen at start, so
//! a slot killed and restarted comes back on the same address.
//!
//! A process is ready when it prints "serving the Pattern API on http://ADDR" on stderr; its
//! stderr is drained for its whole life (a full pipe would block the server), keeping the last
//! lines for failure messages and every line that reports a panic. Every process is started with
//! `kill_on_drop`, and dropping the [`ServerSet`] kills (SIGKILL) and reaps whatever still runs,
//! also while a test unwinds from a panic. This module must never leave a process behind, and
//! never signal a process it did not start (only pids of its own children, while it holds them).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

/// The line `pattern serve` prints once it listens.
const READY: &str = "serving the Pattern API on ";
/// Lines of stderr kept per slot.
const TAIL: usize = 60;

/// How to run `pattern serve`: program, leading arguments (data dir, database URL, `serve`),
/// environment changes, and flags appended after `--listen ADDR`.
#[derive(Debug, Clone)]
pub struct ServeSpec {
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
    extra: Vec<String>,
}

impl ServeSpec {
    /// Copies `command` (which must end with the `serve` subcommand) and appends `extra` flags.
    pub fn from_command(command: &std::process::Command, extra: &[String]) -> Self {
        Self {
            program: command.get_program().to_owned(),
            args: command.get_args().map(ToOwned::to_owned).collect(),
            envs: command
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect(),
            extra: extra.to_vec(),
        }
    }

    fn command(&self, listen: SocketAddr) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.program);
        c.args(&self.args)
            .arg("--listen")
            .arg(listen.to_string())
            .args(&self.extra);
        for (k, v) in &self.envs {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }
}

/// How to stop a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGKILL.
    Kill,
    /// SIGTERM, then SIGKILL if it has not exited after this long.
    Term(Duration),
}

/// What stopping a process did.
#[derive(Debug, Clone)]
pub struct Stopped {
    /// The slot.
    pub slot: usize,
    /// Its pid.
    pub pid: u32,
    /// The signal sent first.
    pub how: Stop,
    /// When it was sent.
    pub signalled_at: Instant,
    /// When the process had exited (reaped).
    pub exited_at: Instant,
    /// Its exit status.
    pub status: Option<ExitStatus>,
    /// Whether a SIGTERM'd process had to be killed after its grace period.
    pub forced: bool,
    /// Whether it had exited before it was signalled (it died on its own).
    pub died_before: bool,
}

#[derive(Default)]
struct SlotState {
    child: Option<tokio::process::Child>,
    pid: Option<u32>,
}

struct Slot {
    addr: SocketAddr,
    state: Mutex<SlotState>,
    /// Bumped every time a process of this slot becomes ready.
    generation: watch::Sender<u64>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

struct Inner {
    spec: ServeSpec,
    slots: Vec<Slot>,
    panics: Arc<Mutex<Vec<String>>>,
    /// How long each successful launch took, from spawn to ready.
    launches: Mutex<Vec<Duration>>,
}

/// Server processes on fixed loopback ports. Cheap to clone; the processes die with the last
/// clone.
#[derive(Clone)]
pub struct ServerSet {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ServerSet {
    /// Picks `slots` free loopback ports and starts one process on each.
    pub async fn start(spec: ServeSpec, slots: usize) -> Result<Self, String> {
        // Hold every probe listener until all ports are chosen, so no two slots share one.
        let probes: Vec<std::net::TcpListener> = (0..slots)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("no free loopback port: {e}"))?;
        let addrs: Vec<SocketAddr> = probes
            .iter()
            .map(std::net::TcpListener::local_addr)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("no local address: {e}"))?;
        drop(probes);
        let set = Self {
            inner: Arc::new(Inner {
                spec,
                slots: addrs
                    .into_iter()
                    .map(|addr| Slot {
                        addr,
                        state: Mutex::new(SlotState::default()),
                        generation: watch::Sender::new(0),
                        tail: Arc::new(Mutex::new(VecDeque::new())),
                    })
                    .collect(),
                panics: Arc::new(Mutex::new(Vec::new())),
                launches: Mutex::new(Vec::new()),
            }),
        };
        for slot in 0..slots {
            set.launch(slot).await?;
        }
        Ok(set)
    }

    /// How many slots.
    pub fn len(&self) -> usize {
        self.inner.slots.len()
    }

    /// `http://127.0.0.1:PORT` of a slot.
    pub fn base(&self, slot: usize) -> String {
        format!("http://{}", self.inner.slots[slot].addr)
    }

    /// Every slot's base URL.
    pub fn bases(&self) -> Vec<String> {
        (0..self.len()).map(|s| self.base(s)).collect()
    }

    /// Whether a slot has a ready process (that nobody is stopping).
    pub fn is_up(&self, slot: usize) -> bool {
        lock(&self.inner.slots[slot].state).child.is_some()
    }

    /// The slots that are up.
    pub fn up(&self) -> Vec<usize> {
        (0..self.len()).filter(|&s| self.is_up(s)).collect()
    }

    /// The pid of a slot's current process.
    pub fn pid(&self, slot: usize) -> Option<u32> {
        lock(&self.inner.slots[slot].state).pid
    }

    /// How many times a process of this slot became ready.
    pub fn generation(&self, slot: usize) -> u64 {
        *self.inner.slots[slot].generation.borrow()
    }

    /// Waits until the slot's generation exceeds `seen` (a restart), at most `limit`.
    pub async fn wait_restart(&self, slot: usize, seen: u64, limit: Duration) -> bool {
        let mut rx = self.inner.slots[slot].generation.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|g| *g > seen))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The last lines a slot's processes wrote on stderr.
    pub fn tail(&self, slot: usize) -> Vec<String> {
        lock(&self.inner.slots[slot].tail).iter().cloned().collect()
    }

    /// How long each launch took (spawn to ready), in order.
    pub fn launch_times(&self) -> Vec<Duration> {
        lock(&self.inner.launches).clone()
    }

    /// Every stderr line (of any process) that reported a panic.
    pub fn panics(&self) -> Vec<String> {
        lock(&self.inner.panics).clone()
    }

    /// Starts a process on a slot that is down and waits until it is ready (60 s at most; an
    /// address still in use is tried again for 10 s). Returns its pid.
    pub async fn launch(&self, slot: usize) -> Result<u32, String> {
        let cell = &self.inner.slots[slot];
        if lock(&cell.state).child.is_some() {
            return Err(format!("slot {slot} is already running"));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn_once(slot).await {
                Ok(pid) => return Ok(pid),
                Err((retry, why)) if retry && Instant::now() < deadline => {
                    note(&cell.tail, &format!("[harness] relaunching: {why}"));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err((_, why)) => return Err(why),
            }
        }
    }

    /// One attempt; `Err((may retry, why))`.
    async fn spawn_once(&self, slot: usize) -> Result<u32, (bool, String)> {
        let cell = &self.inner.slots[slot];
        let spawned = Instant::now();
        let mut child = self
            .inner
            .spec
            .command(cell.addr)
            .spawn()
            .map_err(|e| (false, format!("cannot run pattern serve: {e}")))?;
        let pid = child.id().ok_or((false, "no pid".to_owned()))?;
        let stderr = child.stderr.take().ok_or((false, "no stderr".to_owned()))?;
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<String>();
        let tail = cell.tail.clone();
        let panics = self.inner.panics.clone();
        tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split(READY).nth(1)
                    && let Some(tx) = ready.take()
                {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                }
                if line.contains("panicked") {
                    lock(&panics).push(format!("slot {slot} pid {pid}: {line}"));
                }
                let mut t = lock(&tail);
                if t.len() == TAIL {
                    t.pop_front();
                }
                t.push_back(format!("pid {pid}: {line}"));
            }
        });
        let ready = tokio::select! {
            r = ready_rx => r.ok(),
            _ = tokio::time::sleep(Duration::from_secs(60)) => None,
        };
        match ready {
            Some(url) if url == format!("http://{}", cell.addr) => {
                let mut state = lock(&cell.state);
                state.child = Some(child);
                state.pid = Some(pid);
                drop(state);
                lock(&self.inner.launches).push(spawned.elapsed());
                cell.generation.send_modify(|g| *g += 1);
                Ok(pid)
            }
            Some(url) => {
                let _ = child.kill().await;
                Err((
                    false,
                    format!("slot {slot} announced {url}, not {}", cell.addr),
                ))
            }
            None => {
                // Exited (or hung) before announcing: say why, from its stderr.
                let _ = child.start_kill();
                let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
                // Let the reader catch the last lines.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let tail = self.tail(slot);
                let busy = tail
                    .iter()
                    .rev()
                    .take(5)
                    .any(|l| l.contains("cannot listen"));
                Err((
                    busy,
                    format!(
                        "pattern serve on slot {slot} (pid {pid}) did not become ready ({status:?}); \
                         its stderr ends:\n    {}",
                        tail.iter()
                            .rev()
                            .take(12)
                            .rev()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("\n    ")
                    ),
                ))
            }
        }
    }

    /// Stops a slot's process (the slot is down from the moment this is called) and waits until
    /// it has exited. `None` when the slot was not up.
    pub async fn stop(&self, slot: usize, how: Stop) -> Option<Stopped> {
        let cell = &self.inner.slots[slot];
        let (mut child, pid) = {
            let mut state = lock(&cell.state);
            let child = state.child.take()?;
            (child, state.pid?)
        };
        let died_before = matches!(child.try_wait(), Ok(Some(_)));
        let signalled_at = Instant::now();
        let signal = match how {
            Stop::Kill => Signal::SIGKILL,
            Stop::Term(_) => Signal::SIGTERM,
        };
        let _ = kill(Pid::from_raw(pid as i32), signal);
        let grace = match how {
            Stop::Kill => Duration::from_secs(30),
            Stop::Term(grace) => grace,
        };
        let mut forced = false;
        let status = match tokio::time::timeout(grace, child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                forced = true;
                let _ = child.start_kill();
                child.wait().await.ok()
            }
        };
        Some(Stopped {
            slot,
            pid,
            how,
            signalled_at,
            exited_at: Instant::now(),
            status,
            forced,
            died_before,
        })
    }

    /// SIGTERM to every slot that is up, each given `grace` before SIGKILL.
    pub async fn shutdown(&self, grace: Duration) -> Vec<Stopped> {
        let stops = (0..self.len()).map(|s| self.stop(s, Stop::Term(grace)));
        futures::future::join_all(stops)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

fn note(tail: &Mutex<VecDeque<String>>, note: &str) {
    let mut t = lock(tail);
    if t.len() == TAIL {
        t.pop_front();
    }
    t.push_back(note.to_owned());
}

impl Drop for Inner {
    fn drop(&mut self) {
        for slot in &self.slots {
            let mut state = lock(&slot.state);
            if let Some(mut child) = state.child.take() {
                let _ = child.start_kill();
                // Reap it (bounded), so nothing outlives the harness.
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    match child.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            }
        }
    }
}
