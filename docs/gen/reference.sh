#!/bin/sh
# Regenerates the experiment files' JSON Schema and the manual's reference
# page of each kind from the Rust configuration types (their serde attributes
# and doc comments). tests/schema_describes_every_file.rs fails while these
# files differ from what the binary prints.
set -e
cd "$(dirname "$0")/../.."
cargo build -q --bin flowlab
bin=target/debug/flowlab
$bin schema > docs/schema/experiment.schema.json
for kind in cluster placement systolic validate distributed; do
    $bin schema "$kind" --markdown > "docs/src/reference/$kind.md"
done
