//! The operations NFSv4.2 added (RFC 7862): SEEK, ALLOCATE, DEALLOCATE, COPY.
