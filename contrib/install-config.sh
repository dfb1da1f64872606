#!/bin/sh
# meson install script: install-config.sh SOURCE TARGET installs SOURCE
# as TARGET (under $DESTDIR) unless TARGET exists already, so that
# reinstalling never overwrites an operator's config.
set -eu
src=$1
dst=${DESTDIR:-}$2
if [ -e "$dst" ]; then
	echo "keeping existing $dst"
	exit 0
fi
mkdir -p "$(dirname "$dst")"
install -m 0644 "$src" "$dst"
echo "installed $dst"
