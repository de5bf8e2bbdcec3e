//! Typed settings from flags and environment. Every setting has a flag and an
//! `ORBIT_*` (or `DATABASE_URL`) variable, and its default once, in its flag
//! (`Config::defaults` reads them); bad values fail at start with a message that
//! names what to set. (`ORBIT_PG_USER`, the embedded cluster's system user as root,
//! is a variable only, read by `db::embedded`.)

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// The list cache's default budget (`ORBIT_LIST_CACHE_BYTES`), in bytes.
pub const LIST_CACHE_DEFAULT_BYTES: u64 = 8 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct Config {
    /// PostgreSQL URL. When unset, a private cluster is started under ORBIT_DATA_DIR.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Address to listen on.
    #[arg(long, env = "ORBIT_BIND", default_value = "127.0.0.1:8787")]
    pub bind: SocketAddr,

    /// Directory for the private PostgreSQL cluster (used without DATABASE_URL).
    #[arg(long, env = "ORBIT_DATA_DIR", default_value = "./.orbit")]
    pub data_dir: PathBuf,

    /// Maximum database connections in this instance's pool.
    #[arg(long, env = "ORBIT_DB_POOL_SIZE", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub db_pool_size: u32,

    /// How long a request may wait for a connection, and the statement timeout
    /// (milliseconds, at least 1,000; the lock timeout is half of it). Past it the
    /// request gets 503.
    #[arg(long, env = "ORBIT_DB_TIMEOUT_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1000..=600_000))]
    pub db_timeout_ms: u64,

    /// Write groups this instance runs at once per queue: the quick writes have
    /// `--quick-queues` queues shared by the orbits, the other writes about one queue
    /// per orbit (docs/MECHANISMS.md, "Quick writes", "Group commit for every
    /// write"): the queue's writes that arrive while they run go in its next group,
    /// committed together. A quick queue runs up to as many more while the instance
    /// runs fewer than `--quick-queues` × this quick groups (a busy queue borrows
    /// an idle one's lanes). With the default, a busy orbit has one ordinary group
    /// and one quick group at a time, two while the other quick queues are idle.
    #[arg(long, env = "ORBIT_WRITE_LANES", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub write_lanes: u32,

    /// Groups of single-row reads (`GET /me`, anonymous task and contribution
    /// reads) this instance runs at once per kind (docs/MECHANISMS.md, "Read
    /// groups"): the reads that arrive while they run share the next group's
    /// statement. 0 reads each request alone.
    #[arg(long, env = "ORBIT_READ_LANES", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(0..=8))]
    pub read_lanes: u32,

    /// Whether the successful case of the lease cycle, of plain task and contribution
    /// creation and of a revision runs as a one-statement quick write
    /// (docs/MECHANISMS.md, "Quick writes"). Off, they run the ordinary path, in
    /// its write groups, like every other write.
    #[arg(long, env = "ORBIT_QUICK_WRITES", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub quick_writes: bool,

    /// Queues the quick writes of this instance share (default: the number of cores):
    /// an orbit's quick writes go to queue `orbit id mod N`, so the writes of
    /// several quiet orbits that arrive together commit as one group instead of one
    /// transaction and one commit each (docs/MECHANISMS.md, "Quick writes"). Each
    /// queue runs `--write-lanes` groups at once, and twice that while the others
    /// leave room. More queues: more groups run in parallel, fewer writes share a
    /// commit.
    #[arg(long, env = "ORBIT_QUICK_QUEUES",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub quick_queues: Option<u32>,

    /// HTTP worker threads (default: the number of cores).
    #[arg(long, env = "ORBIT_WORKERS",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,

    /// Log filter, in tracing's EnvFilter syntax; one it cannot read stops the start.
    #[arg(long, env = "ORBIT_LOG", default_value = "info", value_parser = log_filter)]
    pub log: String,

    /// Log format.
    #[arg(long, env = "ORBIT_LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,

    /// Requests per minute per valid token.
    #[arg(long, env = "ORBIT_RATE_LIMIT_PER_MINUTE", default_value_t = 600,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_limit_per_minute: u32,

    /// Requests per minute per client address without a valid token.
    #[arg(long, env = "ORBIT_ANON_RATE_LIMIT_PER_MINUTE", default_value_t = 300,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub anon_rate_limit_per_minute: u32,

    /// Registrations per hour per client address.
    #[arg(long, env = "ORBIT_REGISTER_RATE_LIMIT_PER_HOUR", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub register_rate_limit_per_hour: u32,

    /// Proxies whose X-Forwarded-For is trusted for the client address (comma-separated IPs).
    #[arg(long, env = "ORBIT_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<IpAddr>,

    /// How long an Idempotency-Key and its stored response are kept (hours, at least 24).
    #[arg(long, env = "ORBIT_IDEMPOTENCY_RETENTION_HOURS", default_value_t = 24,
          value_parser = clap::value_parser!(u32).range(24..=8760))]
    pub idempotency_retention_hours: u32,

    /// Seconds an idle keep-alive connection or a client that stalls while sending a
    /// request may hold a worker.
    #[arg(long, env = "ORBIT_CLIENT_TIMEOUT_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub client_timeout_seconds: u64,

    /// Bytes of public list pages kept in memory for repeated reads (0: off). Each
    /// cached page is answered again only after one statement shows the orbit's
    /// revision unchanged and no lease of the orbit expired since.
    #[arg(long, env = "ORBIT_LIST_CACHE_BYTES", default_value_t = LIST_CACHE_DEFAULT_BYTES,
          value_parser = clap::value_parser!(u64).range(0..=1_073_741_824))]
    pub list_cache_bytes: u64,

    /// Long polls of the change feed one client (a token, or an address without
    /// one) may have waiting at once on this instance; beyond, 429.
    #[arg(long, env = "ORBIT_LONG_POLLS_PER_CLIENT", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub long_polls_per_client: u32,

    /// Live event streams (`GET /api/v1/orbits/{orbit}/events`) one client (a token,
    /// or an address without one) may have open at once on this instance; beyond, 429.
    #[arg(long, env = "ORBIT_MAX_STREAMS_PER_CLIENT", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_streams_per_client: u32,

    /// Seconds after which the server ends an event stream (saying `retry:` first);
    /// the client reconnects with `Last-Event-ID` and loses nothing.
    #[arg(long, env = "ORBIT_STREAM_MAX_SECONDS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub stream_max_seconds: u64,

    /// Seconds between `: keep-alive` comments on a quiet event stream (at most 15).
    #[arg(long, env = "ORBIT_STREAM_KEEPALIVE_SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..=15))]
    pub stream_keepalive_seconds: u64,

    /// Batches of new events (one per read of the orbit's feed) an event stream may
    /// have waiting to be sent; a subscriber that falls this far behind (a stalled
    /// reader) is dropped and reconnects with `Last-Event-ID`.
    #[arg(long, env = "ORBIT_STREAM_BUFFER", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub stream_buffer: u32,

    /// The least time between two feed reads of one orbit's event tail, in ms: the
    /// changes of a busy moment go to every stream as one batch, one chunk each.
    /// More saves CPU with many streams of a busy orbit; it adds at most this much
    /// latency to an event. 0 reads once per wake-up.
    #[arg(long, env = "ORBIT_STREAM_BATCH_MS", default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub stream_batch_ms: u64,

    /// Serve `/metrics` only on this address (a second listener that serves nothing
    /// else); the main address then answers 404 there. Unset: on the main address.
    #[arg(long, env = "ORBIT_METRICS_BIND")]
    pub metrics_bind: Option<SocketAddr>,

    /// Serve `/metrics` only to `Authorization: Bearer <this value>` (at least 16
    /// characters); others get 401. Unset: no token needed.
    #[arg(long, env = "ORBIT_METRICS_TOKEN", hide_env_values = true,
          value_parser = metrics_token)]
    pub metrics_token: Option<String>,

    /// Webhooks may target loopback, private, link-local, multicast and unspecified
    /// addresses (for tests and private deployments). Off, such a URL is refused at
    /// creation (422 `webhook_url_forbidden`) and at every delivery.
    #[arg(long, env = "ORBIT_WEBHOOK_ALLOW_PRIVATE", default_value_t = false,
          action = clap::ArgAction::Set)]
    pub webhook_allow_private: bool,

    /// The first retry of a failed webhook delivery waits this long (milliseconds);
    /// each further one waits twice as long as the one before, at most one hour.
    #[arg(long, env = "ORBIT_WEBHOOK_RETRY_BASE_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub webhook_retry_base_ms: u64,

    /// Failed attempts at one change after which a webhook subscription is DISABLED.
    #[arg(long, env = "ORBIT_WEBHOOK_MAX_ATTEMPTS", default_value_t = 12,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub webhook_max_attempts: u32,

    /// TEST ONLY: the connect and total timeout of one webhook delivery
    /// (milliseconds). The contract's is 10 s, the default; tests lower it to watch
    /// a timed-out attempt quickly.
    #[arg(long, env = "ORBIT_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000, hide = true,
          value_parser = clap::value_parser!(u64).range(100..=10_000))]
    pub webhook_timeout_ms: u64,

    /// TEST ONLY: allow lease and handoff durations down to 1 second, so tests can
    /// watch expiry without waiting minutes. Never enable in production.
    #[arg(
        long,
        env = "ORBIT_TEST_SHORT_DURATIONS",
        default_value_t = false,
        hide = true
    )]
    pub test_short_durations: bool,
}

fn log_filter(value: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(value)
        .map(|_| value.to_owned())
        .map_err(|e| format!("not a tracing EnvFilter: {e}"))
}

fn metrics_token(value: &str) -> Result<String, String> {
    let ok = value.len() >= 16 && value.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(value.to_owned())
    } else {
        Err("ORBIT_METRICS_TOKEN must be at least 16 visible ASCII characters".to_owned())
    }
}

/// The cores this process may use (2 when unknown): the default of `--workers` and
/// `--quick-queues`, and the argon2 slots.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

impl Config {
    /// The HTTP worker threads of this instance: `--workers`, or the cores.
    pub fn worker_count(&self) -> usize {
        self.workers.map_or_else(cores, usize::from)
    }

    /// The quick queues this instance runs: `--quick-queues`, or the cores.
    pub fn quick_queue_count(&self) -> usize {
        self.quick_queues.map_or_else(cores, |n| n as usize)
    }

    /// The defaults, as if no flag and no variable were set (for tests and tools):
    /// read from the flags' own `default_value`s, so they have one owner, with the
    /// environment not consulted.
    pub fn defaults() -> Config {
        let command = Config::augment_args(clap::Command::new("defaults"))
            .mut_args(|arg| arg.env(None::<&'static str>));
        let matches = command
            .try_get_matches_from(["defaults"])
            .expect("every setting has a default");
        <Config as clap::FromArgMatches>::from_arg_matches(&matches).expect("the defaults parse")
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Config;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        config: Config,
    }

    fn quick_queues(value: &str) -> Result<Option<u32>, String> {
        Serve::try_parse_from(["serve".to_owned(), format!("--quick-queues={value}")])
            .map(|s| s.config.quick_queues)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn quick_queues_are_bounded_and_default_to_the_cores() {
        assert_eq!(quick_queues("1"), Ok(Some(1)));
        assert_eq!(quick_queues("256"), Ok(Some(256)));
        for bad in ["0", "257", "-1", "two"] {
            let err = quick_queues(bad).expect_err(bad);
            assert!(err.contains("--quick-queues"), "{err}");
        }
        let unset = Serve::try_parse_from(["serve"]).expect("no flags");
        assert_eq!(unset.config.quick_queues, None);
        assert_eq!(unset.config.quick_queue_count(), super::cores());
        let four = Serve::try_parse_from(["serve", "--quick-queues", "4"]).expect("4");
        assert_eq!(four.config.quick_queue_count(), 4);
    }

    /// The database timeout is at least a second (README): a shorter one is refused
    /// at start, not raised behind the operator's back.
    #[test]
    fn the_database_timeout_is_at_least_a_second() {
        let parse = |flag: &str| Serve::try_parse_from(["serve", flag]).map(|s| s.config);
        assert_eq!(
            parse("--db-timeout-ms=1000").expect("1000").db_timeout_ms,
            1000
        );
        for bad in ["--db-timeout-ms=999", "--db-timeout-ms=600001"] {
            let err = parse(bad).map(|_| ()).expect_err(bad).to_string();
            assert!(err.contains("--db-timeout-ms"), "{err}");
        }
    }

    /// Like every setting, a worker count or a log filter the program cannot use
    /// stops it at start, naming the flag, instead of being quietly replaced.
    #[test]
    fn workers_and_the_log_filter_are_checked_at_start() {
        let parse = |flag: &str| Serve::try_parse_from(["serve", flag]).map(|s| s.config);
        assert_eq!(parse("--workers=3").expect("3").worker_count(), 3);
        for bad in [
            "--workers=0",
            "--workers=1025",
            "--workers=-1",
            "--workers=two",
        ] {
            let err = parse(bad).map(|_| ()).expect_err(bad).to_string();
            assert!(err.contains("--workers"), "{err}");
        }
        let unset = Serve::try_parse_from(["serve"]).expect("no flags").config;
        assert_eq!(unset.worker_count(), super::cores());
        assert_eq!(unset.log, "info");
        let debug = parse("--log=info,orbit_commons=debug").expect("a filter");
        assert_eq!(debug.log, "info,orbit_commons=debug");
        for bad in ["--log=info,orbit_commons=loud", "--log=[unclosed"] {
            let err = parse(bad).map(|_| ()).expect_err(bad).to_string();
            assert!(err.contains("--log") && err.contains("EnvFilter"), "{err}");
        }
    }
}
