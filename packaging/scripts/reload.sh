# Let udev and systemd see the files this package added or removed. Never enable,
# start, stop or restart tenure here: a restart stops PostgreSQL, which on the
# leader's host is a failover; the operator restarts when ready (docs/operations.md).
if [ -d /run/udev ] && command -v udevadm >/dev/null 2>&1; then
    udevadm control --reload-rules || true
    # Apply (or, after a removal, drop) the watchdog rule on the devices present now.
    udevadm trigger --action=add --subsystem-match=watchdog || true
    udevadm trigger --action=add --subsystem-match=misc --sysname-match=watchdog || true
fi
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null 2>&1 || true
fi
