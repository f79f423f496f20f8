#!/bin/sh
# nvidia_driver, method distro: read-only probe of what the distribution archive offers and what apt would
# install. It changes nothing on the host: with GPUPROV_TEMP=1 apt reads the host's sources plus the role's
# source as it would be written (GPUPROV_SOURCE, file name GPUPROV_SOURCE_NAME; empty: the role's file left
# out) and fetches the lists into a temporary directory seeded from the host's lists (unchanged indexes are
# not downloaded again), removed on exit; otherwise it reads the host's apt state as it is.
# Environment: GPUPROV_META (the meta package), GPUPROV_SET (the set, space-separated), GPUPROV_EXTRA and
# GPUPROV_BUILD (installed unversioned), GPUPROV_WANT (an exact version or a glob over versions; empty: the
# candidate), GPUPROV_PLAN=1 (also simulate the install).
# Output lines: "@candidate <version>", "@offered <version>" (newest first), "@version <version the set
# would be installed at>", then apt-get -s's "Inst ..." lines or "@simfailed <apt's errors>".
set -eu
opts="-o Debug::NoLocking=true"
if [ "${GPUPROV_TEMP:-}" = 1 ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/parts" "$tmp/lists/partial" "$tmp/cache/archives/partial"
    for f in /etc/apt/sources.list.d/*; do
        if [ -e "$f" ] && [ "${f##*/}" != "$GPUPROV_SOURCE_NAME" ]; then
            ln -s "$f" "$tmp/parts/"
        fi
    done
    if [ -n "${GPUPROV_SOURCE:-}" ]; then
        printf '%s\n' "$GPUPROV_SOURCE" > "$tmp/parts/$GPUPROV_SOURCE_NAME"
    fi
    for f in /var/lib/apt/lists/*_*; do
        if [ -f "$f" ]; then cp -p "$f" "$tmp/lists/"; fi
    done
    opts="$opts -o Dir::Etc::SourceParts=$tmp/parts -o Dir::State::Lists=$tmp/lists -o Dir::Cache=$tmp/cache"
    # shellcheck disable=SC2086
    apt-get $opts -qq -o APT::Update::Error-Mode=any update >&2
fi
# shellcheck disable=SC2086
cand=$(apt-cache $opts policy "$GPUPROV_META" | sed -n 's/^ *Candidate: *//p')
if [ "$cand" = "(none)" ]; then cand=""; fi
echo "@candidate $cand"
# shellcheck disable=SC2086
offered=$(apt-cache $opts madison "$GPUPROV_META" | cut -d'|' -f2 | tr -d ' ')
for v in $offered; do echo "@offered $v"; done
ver=$cand
case "${GPUPROV_WANT:-}" in
    "") ;;
    *'*'*)
        ver=""
        for v in $offered; do
            # shellcheck disable=SC2254
            case "$v" in $GPUPROV_WANT) ver=$v; break ;; esac
        done
        ;;
    *) ver=$GPUPROV_WANT ;;
esac
echo "@version $ver"
if [ "${GPUPROV_PLAN:-}" = 1 ] && [ -n "$ver" ]; then
    pkgs=""
    for p in $GPUPROV_SET; do pkgs="$pkgs $p=$ver"; done
    # shellcheck disable=SC2086
    if out=$(apt-get $opts -s -q --no-install-recommends --allow-change-held-packages install \
            ${GPUPROV_BUILD:-} $pkgs ${GPUPROV_EXTRA:-} 2>&1); then
        echo "$out" | grep '^Inst ' || true
    else
        echo "@simfailed $(echo "$out" | grep -E '^(E:| )' | tr '\n' ' ')"
    fi
fi
