//! `orbit-commons serve | migrate | openapi`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use orbit_commons::config::Config;
use orbit_commons::db;
use orbit_commons::db::embedded::Cluster;
use orbit_commons::http::{routes, telemetry};

#[derive(Parser)]
#[command(
    name = "orbit-commons",
    version,
    about = "Orbit Commons: a knowledge commons with fenced task leases."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    config: Config,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service (the default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Print the generated OpenAPI document.
    Openapi,
}

/// The database URL: the configured one, or a private cluster under ORBIT_DATA_DIR.
fn database(config: &Config) -> Result<(String, Option<Cluster>), String> {
    match &config.database_url {
        Some(url) if !url.trim().is_empty() => Ok((url.clone(), None)),
        _ => {
            tracing::info!(data_dir = %config.data_dir.display(), "DATABASE_URL not set; using a private PostgreSQL cluster");
            let (cluster, url) = Cluster::start(&config.data_dir)?;
            Ok((url, Some(cluster)))
        }
    }
}

/// glibc keeps large freed buffers (argon2 uses 19 MiB per verification) in its
/// heaps; serving them with mmap instead gives the memory back at once.
fn limit_retained_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator tuning; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    limit_retained_memory();
    let cli = Cli::parse();
    let config = cli.config;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Openapi => {
            let doc = routes::openapi();
            match doc.to_pretty_json() {
                Ok(json) => {
                    use std::io::Write;
                    // A closed pipe (`| head`) is not an error worth a panic.
                    let _ = writeln!(std::io::stdout(), "{json}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: cannot render the OpenAPI document: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Migrate => {
            telemetry::init(&config.log, config.log_format);
            let (url, _cluster) = match database(&config) {
                Ok(v) => v,
                Err(e) => return fail(&e),
            };
            match db::migrate(&url) {
                Ok(n) => {
                    println!("{n} migration(s) applied");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Command::Serve => {
            telemetry::init(&config.log, config.log_format);
            serve(config)
        }
    }
}

fn fail(message: &str) -> ExitCode {
    tracing::error!("{message}");
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

fn serve(config: Config) -> ExitCode {
    let (url, mut cluster) = match database(&config) {
        Ok(v) => v,
        Err(e) => return fail(&e),
    };
    if let Err(e) = db::migrate(&url) {
        return fail(&format!(
            "{e} (is DATABASE_URL right and the server running?)"
        ));
    }
    let listener = match std::net::TcpListener::bind(config.bind) {
        Ok(l) => l,
        Err(e) => {
            return fail(&format!(
                "cannot listen on {} (set ORBIT_BIND): {e}",
                config.bind
            ))
        }
    };
    let result = actix_web::rt::System::new().block_on(async move {
        let state = orbit_commons::build_state(&config, &url);
        let running = orbit_commons::start(listener, state)?;
        tracing::info!(addr = %running.addr, "Orbit Commons listening; docs at /docs");
        // actix-web stops gracefully on SIGINT and SIGTERM.
        let out = running.server.await;
        running.state.webhooks.stop();
        running.state.hub.stop();
        out
    });
    if let Some(c) = cluster.as_mut() {
        c.stop();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("server error: {e}")),
    }
}
