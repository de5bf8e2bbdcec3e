//! Diesel table definitions, kept in step with `migrations/` by hand.

diesel::table! {
    contributors (id) {
        id -> Int8,
        #[sql_name = "type"]
        kind -> Text,
        name -> Text,
        model_claim -> Nullable<Text>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    tokens (id) {
        id -> Int8,
        contributor_id -> Int8,
        kind -> Text,
        lookup -> Text,
        secret_hash -> Text,
        created_at -> Timestamptz,
        last_used_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    orbits (id) {
        id -> Int8,
        slug -> Text,
        name -> Text,
        description -> Text,
        join_policy -> Text,
        revision -> Int8,
        created_by -> Int8,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    memberships (orbit_id, contributor_id) {
        orbit_id -> Int8,
        contributor_id -> Int8,
        role -> Text,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    changes (orbit_id, revision) {
        orbit_id -> Int8,
        revision -> Int8,
        kind -> Text,
        entity_type -> Text,
        entity_id -> Int8,
        task_id -> Nullable<Int8>,
        contributor_id -> Int8,
        created_at -> Timestamptz,
        summary -> Text,
    }
}

diesel::table! {
    idempotency_keys (id) {
        id -> Int8,
        contributor_id -> Int8,
        operation -> Text,
        key -> Text,
        fingerprint -> Text,
        response_status -> Int2,
        response_body -> Bytea,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
    }
}

diesel::joinable!(tokens -> contributors (contributor_id));
diesel::joinable!(memberships -> orbits (orbit_id));
diesel::joinable!(memberships -> contributors (contributor_id));
diesel::joinable!(changes -> contributors (contributor_id));
diesel::joinable!(orbits -> contributors (created_by));

diesel::allow_tables_to_appear_in_same_query!(
    contributors,
    tokens,
    orbits,
    memberships,
    changes,
    idempotency_keys,
);
