"""Running untrusted code: one protocol (protocol.py), two runners (bubblewrap.py on this machine, modal_sandboxes.py
deployed) chosen by the operator's settings (choice.py), the limits that hold a run (cgroups.py, seccomp_policy.py,
launcher.py), what it gives back (outputs.py) and how many run at once (slots.py). docs/sandbox.md."""
