"""The sandbox's system-call filter: every call allowed but those a Python program has no use for and an escape
would (debugging other processes, mounting, kernel keyrings, eBPF, perf, new namespaces, modules, io_uring...),
which fail with EPERM. Compiled to a BPF program by libseccomp (through pyseccomp, a ctypes binding of it) and handed
to bubblewrap's `--seccomp`, which installs it just before the program starts.

The list follows Docker's default seccomp profile (moby/profiles, `seccomp/default.json`: what it blocks for an
unprivileged container) plus what it leaves to capabilities we do not rely on. A call from another ABI than the
machine's (32-bit `int 0x80` on x86-64) kills the process: libseccomp's filter checks the architecture first.
"""

from __future__ import annotations

import errno
import functools
import tempfile

DENIED = (
    # other processes' memory and execution
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # file systems and mounts
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "open_by_handle_at", "name_to_handle_at", "quotactl", "swapon", "swapoff",
    # namespaces (clone's namespace flags are filtered below)
    "unshare", "setns",
    # the kernel's keyrings, eBPF, perf, userfaultfd, io_uring, fanotify
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init",
    # the machine itself
    "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "acct",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog", "iopl", "ioperm", "lookup_dcookie",
    "vhangup", "personality",
)  # fmt: skip

# clone(2)'s flags that make a new namespace: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
TIOCSTI = 0x5412  # push characters into a terminal's input


@functools.cache
def seccomp_program() -> bytes:
    """The filter as the BPF program bubblewrap reads (built once per process). Raises OSError or ImportError when
    libseccomp is missing: the bubblewrap runner then refuses to run anything."""
    import pyseccomp as seccomp  # the local extra; libseccomp2 itself comes with the system

    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    denied = seccomp.ERRNO(errno.EPERM)
    for name in DENIED:
        rules.add_rule(denied, name)
    for flag in NAMESPACE_FLAGS:
        rules.add_rule(denied, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory a filter cannot read: "not implemented" makes glibc fall back to clone.
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.add_rule(denied, "ioctl", seccomp.Arg(1, seccomp.EQ, TIOCSTI))
    with tempfile.TemporaryFile() as program:  # libseccomp writes to a file descriptor
        rules.export_bpf(program)
        program.seek(0)
        return program.read()
