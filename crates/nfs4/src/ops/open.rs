//! Opens, share reservations and delegations (RFC 8881 sections 18.2, 18.6, 18.16, 18.18): OPEN, CLOSE, OPEN_DOWNGRADE, DELEGRETURN.
