//! Any bytes as a graph file: loading returns a graph or an error, never
//! a crash; a graph that loads saves and loads again to the same JSON.
#![no_main]

use flowlab_engine::Graph;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = Graph::from_json(data, "fuzz.json") {
        let text = g.to_json();
        let again = Graph::from_json(text.as_bytes(), "again.json").expect("a saved graph loads");
        assert_eq!(again.to_json(), text);
    }
});
