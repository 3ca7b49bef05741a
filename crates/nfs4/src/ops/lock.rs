//! Byte-range locks (RFC 8881 sections 18.10 to 18.12): LOCK, LOCKT, LOCKU.
