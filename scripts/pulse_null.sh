#!/usr/bin/env bash
# Start (or reuse) a private PulseAudio daemon with a virtual microphone, for
# machines without a sound card (CI, containers, developer VMs).
#
# What it sets up:
#   - a PulseAudio daemon running as the current user (root is fine) without
#     D-Bus, listening only on a private unix socket;
#   - sink   "omniflow_null": a null sink (16 kHz mono), a clock-paced sound
#     card that plays into nothing;
#   - source "omniflow_mic": a virtual source on the sink's monitor, so audio
#     played into omniflow_null (paplay -d omniflow_null file.wav) comes out of
#     the "microphone"; both are made the defaults.
#
# PortAudio (sounddevice) reaches it through the ALSA "pulse" plugin
# (Debian libasound2-plugins): with PULSE_SERVER exported, the ALSA devices
# "pulse" and "default" appear as inputs and deliver blocks paced at real time.
# PortAudio lists devices once, when sounddevice is imported: export
# PULSE_SERVER before starting the process.
#
# Usage:
#   export PULSE_SERVER="$(scripts/pulse_null.sh)"   # start or reuse; prints the server
#   scripts/pulse_null.sh --stop                     # stop the daemon
#
# Idempotent: a second run finds the daemon and modules and changes nothing.
# Only the PULSE_SERVER value goes to stdout; messages go to stderr.
# Environment: OMNIFLOW_PULSE_DIR (default /tmp/omniflow-pulse) holds the
# socket, the daemon's HOME/runtime dirs and its log (pulse.log).
# Needs: apt-get install pulseaudio pulseaudio-utils libasound2-plugins
set -euo pipefail

dir="${OMNIFLOW_PULSE_DIR:-/tmp/omniflow-pulse}"
socket="$dir/native"
server="unix:$socket"
sink="omniflow_null"
source="omniflow_mic"

die() {
    echo "pulse_null.sh: $*" >&2
    exit 1
}

for tool in pulseaudio pactl; do
    command -v "$tool" >/dev/null 2>&1 \
        || die "$tool is not installed; run: apt-get install pulseaudio pulseaudio-utils libasound2-plugins"
done

pa() {
    PULSE_SERVER="$server" pactl "$@"
}

if [[ "${1:-}" == "--stop" ]]; then
    if pa info >/dev/null 2>&1; then
        pa exit || true
        echo "pulse_null.sh: stopped the daemon at $server" >&2
    else
        echo "pulse_null.sh: no daemon at $server" >&2
    fi
    exit 0
elif [[ $# -gt 0 ]]; then
    die "unknown argument '$1' (usage: $0 [--stop])"
fi

if ! pa info >/dev/null 2>&1; then
    mkdir -p "$dir/home" "$dir/runtime"
    chmod 700 "$dir" "$dir/home" "$dir/runtime"
    rm -f "$socket"  # left over from a daemon that died
    # -n: no default.pa (it would load D-Bus, udev and X11 modules); the daemon
    # warns that it runs as root without --system and that D-Bus is absent:
    # both are harmless here and go to the log file.
    HOME="$dir/home" XDG_RUNTIME_DIR="$dir/runtime" XDG_CONFIG_HOME="$dir/home/.config" \
        DBUS_SESSION_BUS_ADDRESS="" \
        pulseaudio --daemonize=yes -n \
        --exit-idle-time=-1 \
        --use-pid-file=yes \
        --log-target="file:$dir/pulse.log" \
        --load="module-native-protocol-unix socket=$socket auth-anonymous=1" \
        || die "pulseaudio failed to start; see $dir/pulse.log"
    for _ in $(seq 50); do
        pa info >/dev/null 2>&1 && break
        sleep 0.1
    done
    pa info >/dev/null 2>&1 || die "pulseaudio did not answer on $server within 5 s; see $dir/pulse.log"
    echo "pulse_null.sh: started pulseaudio at $server" >&2
fi

if ! pa list short sinks | awk '{print $2}' | grep -qx "$sink"; then
    pa load-module module-null-sink sink_name="$sink" rate=16000 channels=1 \
        sink_properties=device.description=omniflow-null >/dev/null
fi
if ! pa list short sources | awk '{print $2}' | grep -qx "$source"; then
    pa load-module module-virtual-source source_name="$source" master="$sink.monitor" \
        source_properties=device.description=omniflow-mic >/dev/null
fi
pa set-default-sink "$sink"
pa set-default-source "$source"

echo "$server"
