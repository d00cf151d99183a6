#!/bin/sh
# Empty sources for a workspace of which only the manifests are present, so
# that `cargo build` compiles the dependencies alone: the Dockerfile's
# dependency layer (deploy/docker/Dockerfile), which a change to the sources
# leaves cached.
#
#   sh stub-sources.sh MEMBER...
#
# Each member (a folder holding a Cargo.toml) gets src/lib.rs (every member
# of the workspace is a library) and, for every target its manifest
# declares (`[lib]`, `[[bin]]`, `[[test]]`, `[[bench]]`, `[[example]]`), the
# file cargo looks for: its `path`, or by its `name` in tests/, benches/ or
# examples/. Each holds an empty `main`.
set -eu
for member in "$@"; do
    manifest="$member/Cargo.toml"
    [ -f "$manifest" ] || { echo "stub-sources: no $manifest" >&2; exit 1; }
    mkdir -p "$member/src"
    : > "$member/src/lib.rs"
    # One line per target table: kind, name, path (empty when not given).
    awk '
        function flush() { if (kind != "") print kind "\t" name "\t" path; kind = "" }
        /^\[/ { flush(); name = ""; path = "" }
        /^\[\[(bin|test|bench|example)\]\]/ { kind = $0; gsub(/[][ ]/, "", kind) }
        /^\[lib\]/ { kind = "lib" }
        kind != "" && /^name *=/ { name = $0; sub(/^name *= *"/, "", name); sub(/".*/, "", name) }
        kind != "" && /^path *=/ { path = $0; sub(/^path *= *"/, "", path); sub(/".*/, "", path) }
        END { flush() }
    ' "$manifest" | while IFS="$(printf '\t')" read -r kind name path; do
        case "$kind" in
            bin) dir="src/bin" ;;
            test) dir="tests" ;;
            bench) dir="benches" ;;
            example) dir="examples" ;;
            *) dir="" ;;
        esac
        if [ -n "$path" ]; then
            file="$member/$path"
        elif [ -n "$dir" ] && [ -n "$name" ]; then
            file="$member/$dir/$name.rs"
        else
            continue
        fi
        [ -e "$file" ] && continue
        mkdir -p "$(dirname "$file")"
        echo 'fn main() {}' > "$file"
    done
done
