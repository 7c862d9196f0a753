"""Sans-I/O security code shared by the broker and the clients: SASL mechanisms (PLAIN, SCRAM) and JAAS parsing."""
