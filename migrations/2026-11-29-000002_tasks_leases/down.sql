DROP TABLE handoffs;
DROP TABLE checkpoints;
DROP TABLE leases;
DROP TABLE tasks;
