DROP INDEX IF EXISTS memory_records_id_brin;
DROP INDEX IF EXISTS contributions_id_brin;
