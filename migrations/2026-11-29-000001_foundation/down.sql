DROP TABLE idempotency_keys;
DROP TABLE changes;
DROP TABLE memberships;
DROP TABLE orbits;
DROP TABLE tokens;
DROP TABLE contributors;
