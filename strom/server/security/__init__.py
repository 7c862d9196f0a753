"""Broker-side security: principals, TLS contexts, SASL authentication (sans-I/O) and ACL authorization."""
