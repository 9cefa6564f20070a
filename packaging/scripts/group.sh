# The tenure group (it may open the watchdog device and read /etc/tenure), from
# the package's sysusers.d entry; groupadd where systemd-sysusers is missing.
# The same lines in the .deb's postinst and the .rpm's %pre (packaging/lib.sh).
if command -v systemd-sysusers >/dev/null 2>&1; then
    printf '%s\n' '@SYSUSERS_LINE@' | systemd-sysusers --replace=/usr/lib/sysusers.d/tenure.conf -
elif ! getent group tenure >/dev/null 2>&1; then
    groupadd --system tenure
fi
