#!/bin/sh
# gpuprov lab image recipe, stage 2: runs as root inside the debootstrapped root (via chroot).
#
# Inputs (environment, set by gpuprov.lab.images):
#   GPUPROV_SUITE            bullseye | bookworm | trixie
#   GPUPROV_MIRROR           Debian mirror URL read from the build machine's apt sources
#   GPUPROV_SECURITY_MIRROR  Debian security mirror URL, or empty (then no security entry)
#   GPUPROV_COMPONENTS       space-separated apt components, e.g. "main contrib non-free"
#   GPUPROV_SOURCES_FORMAT   deb822 | one-line
#   GPUPROV_SOURCES_FILE     where the sources go: /etc/apt/sources.list (one-line), or
#                            /etc/apt/sources.list.d/debian.sources or ubuntu.sources (deb822)
#   GPUPROV_STANDIN_NOTE     empty, or one line saying what the stand-in really is: then dress the userland
#   GPUPROV_OS_RELEASE       as the Ubuntu release of these two files (gpuprov.lab.imagespecs renders them)
#   GPUPROV_LSB_RELEASE
#
# Every file it writes is listed in docs/lab.md. No mirror host name is written into the repo: the
# mirror reaches the image only through GPUPROV_MIRROR at build time.
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

# --- apt sources: the machine's mirror, every component a GPU server needs ------------------------
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
if [ "$GPUPROV_SOURCES_FORMAT" = deb822 ]; then
    {
        printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: %s\n' \
            "$GPUPROV_MIRROR" "$GPUPROV_SUITE" "$GPUPROV_SUITE" "$GPUPROV_COMPONENTS"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
        if [ -n "$GPUPROV_SECURITY_MIRROR" ]; then
            printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: %s\n' \
                "$GPUPROV_SECURITY_MIRROR" "$GPUPROV_SUITE" "$GPUPROV_COMPONENTS"
            printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
        fi
    } > "$GPUPROV_SOURCES_FILE"
else
    {
        printf 'deb %s %s %s\n' "$GPUPROV_MIRROR" "$GPUPROV_SUITE" "$GPUPROV_COMPONENTS"
        printf 'deb %s %s-updates %s\n' "$GPUPROV_MIRROR" "$GPUPROV_SUITE" "$GPUPROV_COMPONENTS"
        if [ -n "$GPUPROV_SECURITY_MIRROR" ]; then
            printf 'deb %s %s-security %s\n' "$GPUPROV_SECURITY_MIRROR" "$GPUPROV_SUITE" "$GPUPROV_COMPONENTS"
        fi
    } > "$GPUPROV_SOURCES_FILE"
fi
# Like the Debian container images: do not keep downloaded .debs. Unlike them, keep apt's binary package
# cache (pkgcache.bin), as every server does: without it each apt run, and each open of the cache by
# Ansible's apt module, parses all package lists again (5-7 s on a loaded 2-core machine, against 0.1 s).
cat > /etc/apt/apt.conf.d/docker-clean <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"; };
EOF
# Like them too: no description translations (Translation-en is 33 MB of bookworm's 86 MB of lists, fetched
# and parsed at every container's first apt update, read by nothing here).
printf 'Acquire::Languages "none";\n' > /etc/apt/apt.conf.d/docker-no-languages

# --- the admin user: key-only login, passwordless sudo (a real server's shape) ---------------------
if ! id admin >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash --groups sudo admin
fi
usermod --password '*' admin  # no password; '*' (not '!') so sshd still accepts key logins
install -d -m 0700 -o admin -g admin /home/admin/.ssh
printf 'admin ALL=(ALL:ALL) NOPASSWD: ALL\n' > /etc/sudoers.d/90-gpuprov-lab-admin
chmod 0440 /etc/sudoers.d/90-gpuprov-lab-admin
visudo -c -q -f /etc/sudoers.d/90-gpuprov-lab-admin

# --- sshd: no host keys in the image; each container makes its own at first start ------------------
rm -f /etc/ssh/ssh_host_*
cat > /etc/systemd/system/gpuprov-lab-hostkeys.service <<'EOF'
[Unit]
Description=Generate SSH host keys at first start (gpuprov lab)
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target ssh.service
EOF
systemctl enable gpuprov-lab-hostkeys.service ssh.service

# --- systemd in a container: mask what needs real hardware, a console or a writable /sys ----------
systemctl mask \
    getty.target console-getty.service getty@tty1.service serial-getty@console.service \
    systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
    systemd-udev-trigger.service systemd-udev-settle.service \
    systemd-modules-load.service systemd-remount-fs.service systemd-firstboot.service \
    sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
    systemd-hwdb-update.service cryptsetup.target \
    >/dev/null 2>&1
systemctl set-default multi-user.target
# A fresh machine id per container (systemd writes one at first start).
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
ln -s /etc/machine-id /var/lib/dbus/machine-id

# --- dpkg without fsync, as in Docker's own Debian images: a container's root is thrown away, never
# recovered after a power loss, and fsync on overlayfs is a large part of every package install ----------
printf 'force-unsafe-io\n' > /etc/dpkg/dpkg.cfg.d/gpuprov-lab-unsafe-io

# --- initramfs: MODULES=list, only the modules /etc/initramfs-tools/modules names (none). A container
# boots from no disk, and MODULES=most's 700-odd storage and input drivers make each rebuild (the nouveau
# role's, every kernel install's) take ten times as long. The GPU modules were never in either image.
sed -i 's/^MODULES=.*/MODULES=list/' /etc/initramfs-tools/initramfs.conf
grep -qx 'MODULES=list' /etc/initramfs-tools/initramfs.conf

# --- the installed kernel must come with a real initramfs (roles rebuild and inspect it) -----------
for modules in /lib/modules/*; do
    kernel=${modules##*/}
    [ -e "/boot/initrd.img-$kernel" ] || update-initramfs -c -k "$kernel"
    ls "$modules"/kernel/drivers/gpu/drm/nouveau/nouveau.ko* >/dev/null
done
ls /boot/vmlinuz-* /boot/initrd.img-* >/dev/null

# --- a stand-in: a Debian userland dressed as an Ubuntu release, and labelled ---------------------------
if [ -n "$GPUPROV_STANDIN_NOTE" ]; then
    printf '%s\n' "$GPUPROV_STANDIN_NOTE" > /etc/gpuprov-standin
    # Divert base-files' /etc/os-release so an upgrade of base-files cannot undo the stand-in.
    dpkg-divert --quiet --local --rename --add /etc/os-release
    printf '%s' "$GPUPROV_OS_RELEASE" > /etc/os-release
    printf '%s' "$GPUPROV_LSB_RELEASE" > /etc/lsb-release
    grep -q '^ID=ubuntu$' /etc/os-release
fi

# --- keep the image small -------------------------------------------------------------------------
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/lib/dpkg/*-old \
    /var/log/*.log /var/log/apt/* /tmp/* /var/tmp/* /root/.bash_history
