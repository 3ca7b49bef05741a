//! File data (RFC 8881 sections 18.3, 18.22, 18.32): READ, WRITE, COMMIT.
