//! Child processes for kill loops: copies of the running test binary, each running one test
//! that writes until it is killed and prints a line for every write only after the store
//! acknowledged it. The parent SIGKILLs them at moments of its choosing and starts others in
//! their place, then checks the database against the lines it collected.
//!
//! A line counts only when it is whole and ends with ` .` (the marker is stripped): a kill can
//! cut the last one. A child that exits on its own failed (children run until killed), and
//! [`Children::check`] reports it with the end of its stderr. Test support only: never part of
//! a production build.

use std::io::{BufRead, BufReader, Read};
use std::ops::Range;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a child's environment is made from: its slot and a tag unique to each start.
type EnvFn = dyn Fn(usize, &str) -> Vec<(String, String)> + Send;

/// Most bytes of a child's stderr kept (its end).
const STDERR_KEPT: usize = 16 * 1024;

struct Running {
    child: Child,
    readers: [JoinHandle<()>; 2],
    stderr: Arc<Mutex<Vec<u8>>>,
}

/// A fixed number of slots, each running one child at a time.
pub struct Children {
    test: String,
    env: Box<EnvFn>,
    running: Vec<Running>,
    started: usize,
    kills: usize,
    lines: Arc<Mutex<Vec<String>>>,
    /// The gap between two kills, in milliseconds, and when the next one is due.
    kill_gap: Range<u64>,
    next_kill: Instant,
}

impl std::fmt::Debug for Children {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Children")
            .field("test", &self.test)
            .field("running", &self.running.len())
            .field("kills", &self.kills)
            .finish_non_exhaustive()
    }
}

impl Children {
    /// Starts `slots` children, each this test binary running only the test named `test`
    /// (its full path, e.g. `fts_soak::child`) with the variables `env(slot, tag)` added;
    /// [`tick`](Self::tick) kills one every `kill_gap` milliseconds (a random gap in the range).
    pub fn start(
        test: &str,
        slots: usize,
        kill_gap: Range<u64>,
        env: impl Fn(usize, &str) -> Vec<(String, String)> + Send + 'static,
    ) -> std::io::Result<Self> {
        let mut children = Self {
            test: test.to_owned(),
            env: Box::new(env),
            running: Vec::with_capacity(slots),
            started: 0,
            kills: 0,
            lines: Arc::new(Mutex::new(Vec::new())),
            next_kill: Instant::now() + Duration::from_millis(random_in(&kill_gap)),
            kill_gap,
        };
        for slot in 0..slots {
            let r = children.spawn(slot)?;
            children.running.push(r);
        }
        Ok(children)
    }

    /// [`start`](Self::start) with one child per agent of `agents`, its setting in
    /// `{prefix}_URL`, `{prefix}_AGENT` and `{prefix}_TAG` ([`child_setting`] reads it).
    pub fn per_agent(
        test: &str,
        prefix: &str,
        url: &str,
        agents: Vec<crate::AgentId>,
        kill_gap: Range<u64>,
    ) -> std::io::Result<Self> {
        let (prefix, url) = (prefix.to_owned(), url.to_owned());
        Self::start(test, agents.len(), kill_gap, move |slot, tag| {
            let agent = agents
                .get(slot)
                .map(ToString::to_string)
                .unwrap_or_default();
            vec![
                (format!("{prefix}_URL"), url.clone()),
                (format!("{prefix}_AGENT"), agent),
                (format!("{prefix}_TAG"), tag.to_owned()),
            ]
        })
    }

    fn spawn(&mut self, slot: usize) -> std::io::Result<Running> {
        self.started += 1;
        let tag = format!("s{slot}g{}x", self.started);
        let mut child = Command::new(std::env::current_exe()?)
            .args([
                self.test.as_str(),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .envs((self.env)(slot, &tag))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (Some(out), Some(mut err)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(std::io::Error::other("a child without its pipes"));
        };
        let lines = Arc::clone(&self.lines);
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(whole) = line.strip_suffix(" .")
                    && let Ok(mut lines) = lines.lock()
                {
                    lines.push(whole.to_owned());
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                if let Ok(mut kept) = kept.lock() {
                    kept.extend_from_slice(&buf[..n]);
                    let over = kept.len().saturating_sub(STDERR_KEPT);
                    kept.drain(..over);
                }
            }
        });
        Ok(Running {
            child,
            readers: [stdout_reader, stderr_reader],
            stderr,
        })
    }

    /// SIGKILLs the child in `slot` and starts another in its place.
    pub fn kill_and_replace(&mut self, slot: usize) -> std::io::Result<()> {
        let fresh = self.spawn(slot)?;
        let Some(place) = self.running.get_mut(slot) else {
            return Err(std::io::Error::other(format!("no slot {slot}")));
        };
        let old = std::mem::replace(place, fresh);
        reap(old, true)?;
        self.kills += 1;
        Ok(())
    }

    /// To be called often: fails when a child exited on its own ([`check`](Self::check)), and
    /// when the next kill is due, SIGKILLs a random child and starts another in its place.
    pub fn tick(&mut self) -> std::io::Result<()> {
        self.check()?;
        if Instant::now() >= self.next_kill && !self.running.is_empty() {
            let slot = usize::try_from(random_in(&(0..self.running.len() as u64))).unwrap_or(0);
            self.kill_and_replace(slot)?;
            self.next_kill = Instant::now() + Duration::from_millis(random_in(&self.kill_gap));
        }
        Ok(())
    }

    /// An error naming the exit status and the end of the stderr of a child that exited on its
    /// own (it failed); `Ok` while every child runs.
    pub fn check(&mut self) -> std::io::Result<()> {
        for slot in 0..self.running.len() {
            if self.running[slot].child.try_wait()?.is_some() {
                let failure = reap(self.running.swap_remove(slot), false)?;
                return Err(std::io::Error::other(format!(
                    "a child exited on its own: {failure}"
                )));
            }
        }
        Ok(())
    }

    /// How many children were killed so far.
    pub fn kills(&self) -> usize {
        self.kills
    }

    /// How many whole lines the children printed so far.
    fn lines_so_far(&self) -> usize {
        self.lines.lock().map_or(0, |l| l.len())
    }

    /// Whether a soak that began at `started` with `secs` to run should go on: until `secs` have
    /// passed, and then, on a machine too busy for the children to have done `at_least` lines
    /// of work and killed one, up to twice as long again (so a loaded CI run still checks
    /// something, and a quiet one is not made longer).
    pub fn keep_going(&self, started: std::time::Instant, secs: u64, at_least: usize) -> bool {
        let ran = started.elapsed();
        let base = std::time::Duration::from_secs(secs);
        ran < base || (ran < base * 3 && (self.lines_so_far() <= at_least || self.kills == 0))
    }

    /// SIGKILLs every child and returns every whole line they printed, in the order read.
    pub fn kill_all(mut self) -> std::io::Result<Vec<String>> {
        for r in std::mem::take(&mut self.running) {
            reap(r, true)?;
        }
        let lines = self
            .lines
            .lock()
            .map_err(|_| std::io::Error::other("a reader thread panicked"))?;
        Ok(lines.clone())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for r in &mut self.running {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
    }
}

/// A random number in `range` (its start when it is empty).
fn random_in(range: &Range<u64>) -> u64 {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    let span = range.end.saturating_sub(range.start);
    if span == 0 {
        return range.start;
    }
    range.start + u64::from_le_bytes(b) % span
}

/// Waits for a child (killing it first when `kill`) and its readers; returns its exit status
/// and the end of its stderr.
fn reap(mut r: Running, kill: bool) -> std::io::Result<String> {
    if kill {
        r.child.kill()?; // SIGKILL
    }
    let status = r.child.wait()?;
    for reader in r.readers {
        let _ = reader.join();
    }
    let stderr = r
        .stderr
        .lock()
        .map(|e| String::from_utf8_lossy(&e).into_owned())
        .unwrap_or_default();
    Ok(format!("{status}: {stderr}"))
}

/// In a child of [`Children::per_agent`]: the database URL, the child's agent and its tag (unique
/// to this start). `None` in a normal test run (the child test then does nothing).
pub fn child_setting(prefix: &str) -> Option<(String, crate::AgentId, String)> {
    let var = |name: &str| std::env::var(format!("{prefix}_{name}")).ok();
    let agent = var("AGENT")?.parse().ok()?;
    Some((var("URL")?, agent, var("TAG")?))
}
