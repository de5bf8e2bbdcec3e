//! Raw SQL that PostgreSQL prepares once per connection.
//!
//! `diesel::sql_query` marks every query unsafe to cache, so each execution parses
//! and plans its statement again. Every query of this service is a fixed text chosen
//! from a bounded set (table and column names come from enums, never from input;
//! values are always bound), so it is safe to cache: [`sql`] is `sql_query` without
//! that mark, and diesel's statement cache keys the prepared statement by its text
//! and bind types.

use std::borrow::Cow;
use std::marker::PhantomData;

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::result::QueryResult;
use diesel::serialize::ToSql;
use diesel::sql_types::{HasSqlType, Untyped};
use diesel::RunQueryDsl;

/// A raw statement that may be prepared and cached. Load rows with `QueryableByName`,
/// like `sql_query`.
///
/// Never build its text from request input: every distinct text becomes a prepared
/// statement kept for the connection's lifetime.
#[derive(Debug, Clone)]
#[must_use = "Queries are only executed when calling `load`, `get_result` or similar."]
pub struct Sql {
    text: Cow<'static, str>,
}

/// Starts a cacheable raw query; bind `$1`, `$2`, … in order with `bind`.
pub fn sql(text: impl Into<Cow<'static, str>>) -> Sql {
    Sql { text: text.into() }
}

/// A query with one more bound value.
#[derive(Debug, Clone)]
#[must_use = "Queries are only executed when calling `load`, `get_result` or similar."]
pub struct Bind<Q, V, ST> {
    query: Q,
    value: V,
    _type: PhantomData<ST>,
}

/// Binding the next placeholder, for [`Sql`] and every [`Bind`] built on it.
pub trait BindNext: Sized {
    fn bind<ST, V>(self, value: V) -> Bind<Self, V, ST>
    where
        Pg: HasSqlType<ST>,
        V: ToSql<ST, Pg>,
    {
        Bind {
            query: self,
            value,
            _type: PhantomData,
        }
    }
}

impl BindNext for Sql {}
impl<Q, V, ST> BindNext for Bind<Q, V, ST> {}

impl QueryFragment<Pg> for Sql {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(&self.text);
        Ok(())
    }
}

impl<Q, V, ST> QueryFragment<Pg> for Bind<Q, V, ST>
where
    Q: QueryFragment<Pg>,
    Pg: HasSqlType<ST>,
    V: ToSql<ST, Pg>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        self.query.walk_ast(out.reborrow())?;
        // The placeholder is already in the text.
        out.push_bind_param_value_only(&self.value)
    }
}

// Not static: the cache keys these statements by their SQL text and bind types.
impl QueryId for Sql {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q, V, ST> QueryId for Bind<Q, V, ST> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for Sql {
    type SqlType = Untyped;
}

impl<Q, V, ST> Query for Bind<Q, V, ST> {
    type SqlType = Untyped;
}

impl<Conn> RunQueryDsl<Conn> for Sql {}
impl<Conn, Q, V, ST> RunQueryDsl<Conn> for Bind<Q, V, ST> {}
