//! Databases on a [`PgServer`]: created (empty or cloned from a migrated template),
//! dropped, and dropped when a dead process left them behind.

use std::time::Duration;

use diesel::{Connection, PgConnection, RunQueryDsl};

use super::pg::PgServer;

fn admin(server: &PgServer) -> Result<PgConnection, String> {
    PgConnection::establish(&server.admin_url())
        .map_err(|e| format!("cannot connect to the PostgreSQL server: {e}"))
}

/// Runs one statement on the server's admin database.
pub fn admin_exec(server: &PgServer, sql: &str) -> Result<(), String> {
    diesel::sql_query(sql)
        .execute(&mut admin(server)?)
        .map(|_| ())
        .map_err(|e| format!("{sql}: {e}"))
}

/// Creates database `name`, as a copy of `template` when one is given. Concurrent
/// clones of one template can collide on its lock: those are retried briefly.
pub fn create(server: &PgServer, name: &str, template: Option<&str>) -> Result<(), String> {
    let sql = match template {
        Some(t) => format!("CREATE DATABASE \"{name}\" TEMPLATE \"{t}\""),
        None => format!("CREATE DATABASE \"{name}\""),
    };
    let mut conn = admin(server)?;
    let mut tries = 0;
    loop {
        match diesel::sql_query(&sql).execute(&mut conn) {
            Ok(_) => return Ok(()),
            Err(e) if tries < 50 && e.to_string().contains("being accessed") => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("{sql}: {e}")),
        }
    }
}

/// Drops database `name` (if it exists), disconnecting whoever is still on it.
pub fn drop(server: &PgServer, name: &str) -> Result<(), String> {
    admin_exec(
        server,
        &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
    )
}

/// Drops the databases named `<prefix><pid>` or `<prefix><pid>_<anything>` (for any
/// of `prefixes`) whose process no longer runs. Best effort.
pub fn drop_stale(server: &PgServer, prefixes: &[&str]) {
    #[derive(diesel::QueryableByName)]
    struct Name {
        #[diesel(sql_type = diesel::sql_types::Text)]
        datname: String,
    }
    let Ok(mut conn) = admin(server) else {
        return;
    };
    let names: Vec<Name> = diesel::sql_query("SELECT datname FROM pg_database")
        .load(&mut conn)
        .unwrap_or_default();
    for n in names {
        let pid = prefixes
            .iter()
            .find_map(|p| n.datname.strip_prefix(p))
            .and_then(|rest| rest.split('_').next())
            .and_then(|p| p.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if pid != std::process::id() && !super::process_alive(pid) {
            let _ = diesel::sql_query(format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                n.datname
            ))
            .execute(&mut conn);
        }
    }
}

/// A migrated database that fresh databases are cloned from (cheaper than
/// migrating each one).
#[derive(Debug, Clone)]
pub struct Template {
    server: PgServer,
    name: String,
}

impl Template {
    /// Creates database `name` on `server` and applies the service's migrations.
    pub fn create(server: PgServer, name: String) -> Result<Template, String> {
        create(&server, &name, None)?;
        crate::db::migrate(&server.url_for(&name))
            .map_err(|e| format!("migrate the template database {name}: {e}"))?;
        Ok(Template { server, name })
    }

    pub fn server(&self) -> &PgServer {
        &self.server
    }

    /// A new database `name`, a copy of the template; returns its URL.
    pub fn fresh(&self, name: &str) -> Result<String, String> {
        create(&self.server, name, Some(&self.name))?;
        Ok(self.server.url_for(name))
    }
}
