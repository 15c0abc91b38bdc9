//! `cargo xtask pg start|stop|status`: a throwaway PostgreSQL cluster on
//! 127.0.0.1 for tests and benches, kept under `<root>/.cache/pg/` (or under
//! `/tmp/pattern-pg-<hash>/` when the `postgres` user cannot reach the clone).
//! It must never touch any other cluster (such as the distribution's own on
//! port 5432), never listen beyond 127.0.0.1, and never print anything but the
//! URL on stdout for `start`, so scripts can capture it.

use std::fs;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use crate::{cmd, workspace};

/// Environment variable choosing the port (default [`DEFAULT_PORT`]).
pub(crate) const PORT_ENV: &str = "PATTERN_PG_PORT";
/// Port used when [`PORT_ENV`] is unset.
pub(crate) const DEFAULT_PORT: u16 = 55432;
/// Longest usable Unix socket path (sun_path is 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// What to do with the cluster.
#[derive(Debug, Clone, Copy, Subcommand)]
pub(crate) enum Action {
    /// Create (if needed) and start the cluster; prints its URL on stdout.
    Start,
    /// Stop the cluster (fast shutdown); fine if already stopped.
    Stop,
    /// Print `running URL` or `stopped URL`.
    Status,
}

/// Run a `pg` subcommand.
pub(crate) fn run(root: &Path, action: Action) -> Result<()> {
    match action {
        Action::Start => {
            let url = start(root)?;
            println!("{url}");
        }
        Action::Stop => stop(root)?,
        Action::Status => {
            let cluster = Cluster::locate(root)?;
            match cluster.state()? {
                State::Running { port } => println!("running {}", url(port)),
                State::Stopped => println!("stopped {}", url(cluster.port)),
            }
        }
    }
    Ok(())
}

/// The connection URL for a cluster on `port`.
pub(crate) fn url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

/// Start the cluster (idempotent) and return its URL.
pub(crate) fn start(root: &Path) -> Result<String> {
    let cluster = Cluster::locate(root)?;
    if let State::Running { port } = cluster.state()? {
        if !listening(port) {
            bail!(
                "{} names a live process but nothing accepts connections on 127.0.0.1:{port}; \
                 if no PostgreSQL is running there, the file is stale: delete it and retry",
                cluster.pid_file().display()
            );
        }
        let url = url(port);
        cluster.write_url(&url)?;
        eprintln!("pg: already running");
        return Ok(url);
    }
    if cluster.data().join("PG_VERSION").is_file() {
        cluster.check_version()?;
    } else {
        cluster.initdb()?;
    }
    cluster.clear_stale_pid()?;
    ensure_port_free(cluster.port)?;
    cluster.start_server()?;
    let url = url(cluster.port);
    cluster.write_url(&url)?;
    eprintln!("pg: started on 127.0.0.1:{}", cluster.port);
    Ok(url)
}

/// True when the cluster is running.
pub(crate) fn is_running(root: &Path) -> Result<bool> {
    Ok(matches!(
        Cluster::locate(root)?.state()?,
        State::Running { .. }
    ))
}

/// Stop the cluster (idempotent).
pub(crate) fn stop(root: &Path) -> Result<()> {
    let cluster = Cluster::locate(root)?;
    match cluster.state()? {
        State::Stopped => eprintln!("pg: already stopped"),
        State::Running { .. } => {
            cmd::run(cluster.pg_ctl().args(["-m", "fast", "-w", "stop"]))?;
            eprintln!("pg: stopped");
        }
    }
    let url_file = cluster.url_file();
    if url_file.exists() {
        fs::remove_file(&url_file).with_context(|| format!("removing {}", url_file.display()))?;
    }
    Ok(())
}

/// A cluster of its own for one command (`cargo xtask sqlx`): created in a fresh folder under
/// the system's temporary folder (short enough for the socket, reachable by the `postgres`
/// user), started on a free port of 127.0.0.1, stopped and deleted when dropped. It never uses
/// the workspace's cluster (`pg start`) nor its port, so it works whether that one runs or not.
#[derive(Debug)]
pub(crate) struct Throwaway {
    cluster: Cluster,
    running: bool,
}

impl Throwaway {
    /// Create and start it; `tag` names the folder (`/tmp/pattern-<tag>-<pid>`).
    pub(crate) fn start(tag: &str) -> Result<Self> {
        let bin = find_bin_dir().context(
            "PostgreSQL server binaries not found (no initdb/pg_ctl under /usr/lib/postgresql/*/bin \
             or on PATH); run `cargo xtask setup`",
        )?;
        let dir = std::env::temp_dir().join(format!("pattern-{tag}-{}", std::process::id()));
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let as_postgres = cmd::is_root();
        if as_postgres {
            give_to_postgres(&dir)?;
        }
        let port = free_port()?;
        let mut this = Self {
            cluster: Cluster {
                bin,
                home: dir.clone(),
                dir,
                as_postgres,
                port,
            },
            running: false,
        };
        this.cluster.initdb()?;
        this.running = true;
        this.cluster.start_server()?;
        Ok(this)
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        url(self.cluster.port)
    }

    /// The folder of PostgreSQL's client and server programs (`psql` for a bootstrap schema).
    pub(crate) fn bin(&self) -> &Path {
        &self.cluster.bin
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        if self.running {
            let stopped =
                cmd::output(
                    self.cluster
                        .pg_ctl()
                        .args(["-m", "immediate", "-w", "stop"]),
                );
            if let Err(err) = stopped {
                eprintln!("xtask: could not stop the throwaway PostgreSQL: {err:#}");
            }
        }
        if let Err(err) = fs::remove_dir_all(&self.cluster.dir) {
            eprintln!(
                "xtask: could not remove {}: {err}",
                self.cluster.dir.display()
            );
        }
    }
}

/// A port of 127.0.0.1 nothing listens on now (the system's choice).
fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// The highest-version folder holding both `initdb` and `pg_ctl`: scans
/// `/usr/lib/postgresql/*/bin`, then falls back to `PATH`.
pub(crate) fn find_bin_dir() -> Option<PathBuf> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let mut best: Option<(Vec<u64>, PathBuf)> = None;
    if let Ok(entries) = fs::read_dir("/usr/lib/postgresql") {
        for entry in entries.flatten() {
            let version = parse_version(&entry.file_name().to_string_lossy());
            let bin = entry.path().join("bin");
            let Some(version) = version else { continue };
            if has_tools(&bin) && best.as_ref().is_none_or(|(v, _)| version > *v) {
                best = Some((version, bin));
            }
        }
    }
    if let Some((_, bin)) = best {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|dir| has_tools(dir))
}

/// `"15"` → `[15]`, `"9.6"` → `[9, 6]`; `None` if not a version.
fn parse_version(name: &str) -> Option<Vec<u64>> {
    name.split('.').map(|p| p.parse().ok()).collect()
}

/// Port from [`PORT_ENV`] or [`DEFAULT_PORT`].
fn port() -> Result<u16> {
    match std::env::var(PORT_ENV) {
        Ok(value) => value
            .trim()
            .parse()
            .with_context(|| format!("{PORT_ENV}={value:?} is not a port number")),
        Err(_) => Ok(DEFAULT_PORT),
    }
}

/// FNV-1a 64: a hash that is stable across Rust versions and machines.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The fallback cluster folder for a workspace at `root`.
fn fallback_dir(root: &Path) -> PathBuf {
    let hash = fnv1a(root.as_os_str().as_encoded_bytes());
    PathBuf::from(format!("/tmp/pattern-pg-{hash:016x}"))
}

fn socket_path_fits(dir: &Path, port: u16) -> bool {
    dir.join(format!(".s.PGSQL.{port}")).as_os_str().len() <= MAX_SOCKET_PATH
}

/// True when something accepts TCP connections on 127.0.0.1:`port`.
fn listening(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

fn ensure_port_free(port: u16) -> Result<()> {
    match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == ErrorKind::AddrInUse => bail!(
            "port {port} on 127.0.0.1 is already in use by another process (not this cluster); \
             stop it or choose another port with {PORT_ENV}=<port>"
        ),
        Err(err) => Err(err).with_context(|| format!("checking port {port} on 127.0.0.1")),
    }
}

/// Whether the cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Running, listening on `port` (read from `postmaster.pid`).
    Running {
        /// The port it actually listens on.
        port: u16,
    },
    /// Not running (or never created).
    Stopped,
}

/// Where the cluster lives and how to run its tools.
#[derive(Debug)]
struct Cluster {
    /// Folder with `initdb`, `pg_ctl`.
    bin: PathBuf,
    /// Folder holding `data/`, `server.log` and the socket.
    dir: PathBuf,
    /// `<root>/.cache/pg`: always holds the `url` file.
    home: PathBuf,
    /// Run tools as the `postgres` user (we are root).
    as_postgres: bool,
    /// Port to start on.
    port: u16,
}

impl Cluster {
    /// Decide the folders, creating them and (as root) handing them to `postgres`.
    fn locate(root: &Path) -> Result<Self> {
        let bin = find_bin_dir().context(
            "PostgreSQL server binaries not found (no initdb/pg_ctl under /usr/lib/postgresql/*/bin \
             or on PATH); run `cargo xtask setup`",
        )?;
        let port = port()?;
        let home = workspace::cache_dir(root).join("pg");
        fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
        let as_postgres = cmd::is_root();
        let mut dir = home.clone();
        if as_postgres {
            if !cmd::succeeds(Command::new("id").args(["-u", "postgres"])) {
                bail!("running as root but there is no `postgres` user; run `cargo xtask setup`");
            }
            give_to_postgres(&home)?;
            let reachable = cmd::succeeds(
                Command::new("runuser")
                    .args(["-u", "postgres", "--", "test", "-x"])
                    .arg(&home)
                    .current_dir("/"),
            );
            if !reachable {
                dir = fallback_dir(root);
                eprintln!(
                    "pg: the postgres user cannot reach {} (a parent folder is private); \
                     using {} instead",
                    home.display(),
                    dir.display()
                );
            }
        }
        if dir == home && !socket_path_fits(&dir, port) {
            dir = fallback_dir(root);
            eprintln!(
                "pg: socket path under {} would be too long; using {} instead",
                home.display(),
                dir.display()
            );
        }
        if dir != home {
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            if as_postgres {
                give_to_postgres(&dir)?;
            }
        }
        Ok(Self {
            bin,
            dir,
            home,
            as_postgres,
            port,
        })
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    fn pid_file(&self) -> PathBuf {
        self.data().join("postmaster.pid")
    }

    fn url_file(&self) -> PathBuf {
        self.home.join("url")
    }

    /// A command running PostgreSQL tool `name` as the right user.
    fn tool(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        // The caller's folder may be unreadable for `postgres`.
        cmd.current_dir(&self.dir);
        // Stdout is kept for the URL alone.
        cmd.stdout(Stdio::from(std::io::stderr()));
        cmd
    }

    /// `pg_ctl -D DATA`.
    fn pg_ctl(&self) -> Command {
        let mut cmd = self.tool("pg_ctl");
        cmd.arg("-D").arg(self.data());
        cmd
    }

    fn server_options(&self) -> String {
        format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on",
            self.port,
            cmd::shell_quote(&self.dir.to_string_lossy())
        )
    }

    /// `pg_ctl start`, waiting until it accepts connections; the log's tail on failure.
    fn start_server(&self) -> Result<()> {
        let started = cmd::run(self.pg_ctl().args(["-l"]).arg(self.log()).args([
            "-w",
            "-t",
            "60",
            "-o",
            &self.server_options(),
            "start",
        ]));
        if let Err(err) = started {
            self.print_log_tail();
            return Err(err.context(format!(
                "PostgreSQL did not start; see {}",
                self.log().display()
            )));
        }
        Ok(())
    }

    fn initdb(&self) -> Result<()> {
        cmd::run(
            self.tool("initdb")
                .arg("-D")
                .arg(self.data())
                .args(["-U", "postgres", "-A", "trust", "-E", "UTF8"])
                .args(["--locale=C", "--no-sync"]),
        )
        .context("initdb failed")
    }

    /// Refuse a data folder made by another major version than `bin`'s.
    fn check_version(&self) -> Result<()> {
        let made_by = fs::read_to_string(self.data().join("PG_VERSION")).unwrap_or_default();
        let made_by = made_by.trim();
        let bin_version = self
            .bin
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned());
        match bin_version {
            Some(v) if parse_version(&v).is_some() && v != made_by => bail!(
                "{} was created by PostgreSQL {made_by} but the server binaries are version {v}; \
                 the cluster is throwaway: delete that folder and start again",
                self.data().display()
            ),
            _ => Ok(()),
        }
    }

    fn state(&self) -> Result<State> {
        if !self.data().join("PG_VERSION").is_file() {
            return Ok(State::Stopped);
        }
        let out = cmd::output(self.pg_ctl().arg("status").stdout(Stdio::piped()))?;
        match out.status.code() {
            Some(0) => Ok(State::Running {
                port: self.running_port().unwrap_or(self.port),
            }),
            Some(3 | 4) => Ok(State::Stopped),
            _ => bail!(
                "`pg_ctl status` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }
    }

    /// The port line (4th) of `postmaster.pid`.
    fn running_port(&self) -> Option<u16> {
        let text = fs::read_to_string(self.pid_file()).ok()?;
        text.lines().nth(3)?.trim().parse().ok()
    }

    /// Remove a `postmaster.pid` whose process is gone (the cluster is stopped).
    fn clear_stale_pid(&self) -> Result<()> {
        let pid_file = self.pid_file();
        let Ok(text) = fs::read_to_string(&pid_file) else {
            return Ok(());
        };
        let pid = text.lines().next().unwrap_or("").trim();
        let comm = fs::read_to_string(Path::new("/proc").join(pid).join("comm"));
        if !pid.is_empty() && comm.is_ok_and(|c| c.trim().starts_with("postgres")) {
            bail!(
                "{} names process {pid}, a live PostgreSQL that `pg_ctl status` does not see as \
                 this cluster's server (started by another user?); stop it, then retry",
                pid_file.display()
            );
        }
        eprintln!(
            "pg: removing stale {} (process {pid} is gone or is not PostgreSQL)",
            pid_file.display()
        );
        fs::remove_file(&pid_file).with_context(|| format!("removing {}", pid_file.display()))
    }

    fn write_url(&self, url: &str) -> Result<()> {
        let file = self.url_file();
        fs::write(&file, format!("{url}\n")).with_context(|| format!("writing {}", file.display()))
    }

    fn print_log_tail(&self) {
        if let Ok(text) = fs::read_to_string(self.log()) {
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("--- last lines of {} ---", self.log().display());
            for line in &lines[lines.len().saturating_sub(20)..] {
                eprintln!("{line}");
            }
        }
    }
}

/// `chown postgres:postgres DIR` (not recursive: the data folder is created
/// by `initdb` running as `postgres`).
fn give_to_postgres(dir: &Path) -> Result<()> {
    let out = cmd::output(Command::new("chown").arg("postgres:postgres").arg(dir))?;
    if !out.status.success() {
        bail!(
            "chown postgres:postgres {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Pure helpers: versions, hashing, socket path length, URL.

    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(parse_version("15"), Some(vec![15]));
        assert_eq!(parse_version("9.6"), Some(vec![9, 6]));
        assert_eq!(parse_version("main"), None);
        assert!(parse_version("10") > parse_version("9.6"));
    }

    #[test]
    fn fallback_is_stable_and_16_hex() {
        let a = fallback_dir(Path::new("/root/work/main"));
        assert_eq!(a, fallback_dir(Path::new("/root/work/main")));
        let name = a.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        let hex = name.trim_start_matches("pattern-pg-");
        assert_eq!(hex.len(), 16);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, fallback_dir(Path::new("/root/work/other")));
    }

    #[test]
    fn fnv_known_value() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn long_socket_paths_are_refused() {
        assert!(socket_path_fits(Path::new("/work/main/.cache/pg"), 55432));
        let long = PathBuf::from(format!("/{}", "x".repeat(100)));
        assert!(!socket_path_fits(&long, 55432));
    }

    #[test]
    fn url_format() {
        assert_eq!(url(55432), "postgres://postgres@127.0.0.1:55432/postgres");
    }
}
