"""The sandbox runner tried as an attacker would, on real processes (bubblewrap, control groups, seccomp)."""
