"""The cluster controller (ZooKeeper mode)."""
