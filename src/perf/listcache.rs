//! The list cache: public list pages of an orbit (the API's task and contribution
//! lists) and its rendered page for people (`/o/{slug}`), kept in memory and
//! answered again only while one statement proves them still exact
//! (docs/MECHANISMS.md, "The list cache").
//!
//! A page is read with its [`Stamp`] (an API list in one statement; the orbit page
//! in several, after the orbit's row, stamped with the probe's clock:
//! `domain::views::orbit_page`): the orbit's revision, the database clock the page
//! was decided at (`now`), and
//! `valid_until`, the first moment after `now` at which anything the page or its
//! filters could show changes by time alone (an active lease of the orbit running
//! out). Every write of an orbit advances its revision in the write's own
//! transaction, so a later statement that reads the same revision, with its clock in
//! `[now, valid_until)`, would compute the same page byte for byte. The check is
//! made against the database on every request ([`Probe`]); nothing here depends on
//! notifications, so it holds with any number of instances.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use actix_web::web::Bytes;
use chrono::{DateTime, Utc};
use diesel::deserialize::QueryableByName;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text, Timestamptz};

/// The default budget: 8 MiB of page bodies (and their keys).
pub use crate::config::LIST_CACHE_DEFAULT_BYTES as DEFAULT_BYTES;

/// Bytes charged per entry beyond its body and parameters (map and queue slots).
const ENTRY_OVERHEAD: usize = 128;

/// Which list a page is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListRoute {
    /// `GET /api/v1/orbits/{orbit}/tasks`
    Tasks,
    /// `GET /api/v1/orbits/{orbit}/contributions`
    Contributions,
    /// The orbit's HTML page, `GET /o/{slug}` (`http::pages`).
    OrbitPage,
}

/// A page's identity: the list, the orbit (by id, however the path named it) and
/// the query parameters with their defaults applied.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListKey {
    pub route: ListRoute,
    pub orbit_id: i64,
    pub params: String,
}

pub use crate::store::stamp::{Stamp, Stamped};

/// The orbit as the hit check reads it: one statement, one index lookup.
#[derive(Debug, QueryableByName)]
pub struct Probe {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub revision: i64,
    /// `clock_timestamp()`, the clock every lease decision reads.
    #[diesel(sql_type = Timestamptz)]
    pub now: DateTime<Utc>,
}

/// The orbit named in a path (a positive id or a slug, as `store::orbits::find`
/// reads it), its revision and the database clock.
pub fn probe(conn: &mut PgConnection, reference: &str) -> QueryResult<Option<Probe>> {
    use crate::db::BindNext;
    if crate::store::orbits::names_nothing(reference) {
        return Ok(None);
    }
    match crate::store::orbits::id_of(reference) {
        Some(id) => crate::db::sql(
            "SELECT id, revision, clock_timestamp() AS now FROM orbits WHERE id = $1",
        )
        .bind::<BigInt, _>(id)
        .get_result::<Probe>(conn)
        .optional(),
        None => crate::db::sql(
            "SELECT id, revision, clock_timestamp() AS now FROM orbits WHERE slug = $1",
        )
        .bind::<Text, _>(reference)
        .get_result::<Probe>(conn)
        .optional(),
    }
}

struct Entry {
    stamp: Stamp,
    body: Bytes,
    cost: usize,
    seq: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<ListKey, Entry>,
    /// Insertion order for eviction (oldest first); a slot whose `seq` no longer
    /// matches its entry was replaced and is skipped.
    order: VecDeque<(ListKey, u64)>,
    used: usize,
    seq: u64,
}

/// Page bodies by [`ListKey`], within a byte budget; oldest first out.
pub struct ListCache {
    budget: usize,
    inner: Mutex<Inner>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl ListCache {
    /// A cache of at most `budget` bytes; 0 turns it off (every page is read).
    pub fn new(budget: usize) -> ListCache {
        ListCache {
            budget,
            inner: Mutex::new(Inner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached body of `key` if its stamp holds at `revision` and `now` (read in
    /// one statement by [`probe`]); counts a hit or a miss.
    pub fn get(&self, key: &ListKey, revision: i64, now: DateTime<Utc>) -> Option<Bytes> {
        let found = if self.budget == 0 {
            None
        } else {
            let inner = self.lock();
            inner
                .map
                .get(key)
                .filter(|e| e.stamp.holds_at(revision, now))
                .map(|e| e.body.clone())
        };
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps a page read at `stamp`. A page larger than a quarter of the budget is
    /// not kept; a page read at an older revision than the one kept is dropped.
    pub fn put(&self, key: ListKey, stamp: Stamp, body: Bytes) {
        let cost = body.len() + key.params.len() + ENTRY_OVERHEAD;
        if cost > self.budget / 4 {
            return;
        }
        let mut guard = self.lock();
        let inner = &mut *guard;
        if let Some(old) = inner.map.get(&key) {
            if old.stamp.m_revision > stamp.m_revision {
                return;
            }
            inner.used -= old.cost;
            inner.map.remove(&key);
        }
        while inner.used + cost > self.budget {
            let Some((oldest, seq)) = inner.order.pop_front() else {
                break;
            };
            if inner.map.get(&oldest).is_some_and(|e| e.seq == seq) {
                if let Some(e) = inner.map.remove(&oldest) {
                    inner.used -= e.cost;
                }
            }
        }
        // Replaced entries leave their old slots behind: drop them before the queue
        // outgrows the map.
        if inner.order.len() > 2 * inner.map.len() + 64 {
            let map = &inner.map;
            inner
                .order
                .retain(|(k, s)| map.get(k).is_some_and(|e| e.seq == *s));
        }
        inner.seq += 1;
        let seq = inner.seq;
        inner.order.push_back((key.clone(), seq));
        inner.used += cost;
        inner.map.insert(
            key,
            Entry {
                stamp,
                body,
                cost,
                seq,
            },
        );
    }

    /// Bytes charged to the entries kept now, and how many there are.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.used, inner.map.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(revision: i64, now_s: i64, until_s: Option<i64>) -> Stamp {
        let at = |s| DateTime::from_timestamp(s, 0).expect("a valid time");
        Stamp {
            m_revision: revision,
            m_now: at(now_s),
            m_valid_until: until_s.map(at),
        }
    }

    fn key(orbit_id: i64) -> ListKey {
        ListKey {
            route: ListRoute::Tasks,
            orbit_id,
            params: "p".into(),
        }
    }

    #[test]
    fn a_stamp_holds_for_its_revision_inside_its_window_only() {
        let at = |s| DateTime::from_timestamp(s, 0).expect("a valid time");
        let s = stamp(7, 100, Some(110));
        assert!(s.holds_at(7, at(100)));
        assert!(s.holds_at(7, at(109)));
        assert!(!s.holds_at(7, at(110)), "valid_until is exclusive");
        assert!(!s.holds_at(7, at(99)), "a clock that went back");
        assert!(!s.holds_at(8, at(105)));
        assert!(stamp(7, 100, None).holds_at(7, at(1_000_000)));
    }

    #[test]
    fn the_budget_bounds_the_entries_oldest_first() {
        let body = Bytes::from(vec![b'x'; 1000]);
        let cost = 1000 + 1 + ENTRY_OVERHEAD;
        let cache = ListCache::new(cost * 4);
        let at = DateTime::from_timestamp(100, 0).expect("a valid time");
        for orbit in 1..=6 {
            cache.put(key(orbit), stamp(1, 100, None), body.clone());
        }
        assert_eq!(cache.usage(), (cost * 4, 4));
        assert!(cache.get(&key(1), 1, at).is_none());
        assert!(cache.get(&key(2), 1, at).is_none());
        assert!(cache.get(&key(6), 1, at).is_some());
        // Replacing an entry many times keeps the queue bounded.
        for revision in 2..500 {
            cache.put(key(6), stamp(revision, 100, None), body.clone());
        }
        assert!(cache.lock().order.len() <= 2 * 4 + 65);
        assert!(cache.get(&key(6), 499, at).is_some());
        // An older page never replaces a newer one.
        cache.put(key(6), stamp(3, 100, None), body.clone());
        assert!(cache.get(&key(6), 499, at).is_some());
        // Off: nothing is kept.
        let off = ListCache::new(0);
        off.put(key(1), stamp(1, 100, None), body);
        assert_eq!(off.usage(), (0, 0));
    }
}
