//! Emulated links: Send/Recv transfers between two devices of one process
//! delivered as if over a link of given bandwidth and latency, so that
//! communication-heavy placements can be measured on one host at the link
//! speeds a cluster has.
//!
//! Contract. A transfer of `b` wire bytes that a Send starts at `t` on a
//! pair (source, destination) is handed to its Recv no earlier than
//! `s + latency + b / bandwidth`, where `s = max(t, when the pair's previous
//! transfer was delivered)`: the transfers of one direction of a pair queue
//! one behind the other, as one copy engine per device does in the
//! graph-level simulator. The sending device does not wait: a delivery
//! thread of the step holds the tensor until its time. Sleeping is the
//! operating system's (tens of microseconds late at most here), never
//! early.
//!
//! Two users: a multi-device session (one [`LinkDelivery`] per step, its
//! thread ended when the step's partitions finish) and a task of a cluster
//! ([`LinkEmulator`]: one delivery thread for the task's life in front of
//! its rendezvous, so a pair's queue spans steps, and concurrent steps of
//! asynchronous workers share it).

use crate::error::{EngineError, Result};
use crate::framework::rendezvous::{Rendezvous, RendezvousKey};
use crate::tensor::Tensor;
use std::borrow::Cow;
use std::collections::{BinaryHeap, HashMap};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// A link's speed: bandwidth in Gbit/s and one-way latency in µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmulatedLink {
    pub gbps: f64,
    pub latency_us: f64,
}

/// The slowest and fastest emulated bandwidths (Gbit/s: 1 kbit/s to
/// 1 Pbit/s) and the longest latency (µs: 10 s). Beyond them a transfer's
/// delay outgrows what a step can wait (a latency of 1e300 µs overflowed
/// the delay and panicked; 1e12 µs hung the step for days).
pub const MIN_LINK_GBPS: f64 = 1e-6;
pub const MAX_LINK_GBPS: f64 = 1e6;
pub const MAX_LINK_LATENCY_US: f64 = 1e7;

/// A value as a person reads it: exponent notation where plain digits
/// would run to hundreds.
fn shown(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-3..1e7).contains(&v.abs()) { format!("{v:e}") } else { format!("{v}") }
}

impl EmulatedLink {
    /// A link, refusing a bandwidth outside `MIN_LINK_GBPS..=MAX_LINK_GBPS`
    /// or a latency outside `0..=MAX_LINK_LATENCY_US` (NaN included).
    pub fn new(gbps: f64, latency_us: f64) -> Result<EmulatedLink> {
        if !(MIN_LINK_GBPS..=MAX_LINK_GBPS).contains(&gbps) {
            return Err(EngineError::Config {
                key: "link.gbps".into(),
                detail: format!("must be a bandwidth from {MIN_LINK_GBPS:e} to {MAX_LINK_GBPS:e} Gbit/s, got {}", shown(gbps)),
            });
        }
        if !(0.0..=MAX_LINK_LATENCY_US).contains(&latency_us) {
            return Err(EngineError::Config {
                key: "link.latency_us".into(),
                detail: format!("must be from 0 to {MAX_LINK_LATENCY_US:e} us (10 s), got {}", shown(latency_us)),
            });
        }
        Ok(EmulatedLink { gbps, latency_us })
    }

    /// Parses `5gbps,50us` (bandwidth in gbps or mbps; latency in us or ms;
    /// the latency may be left out for 0).
    pub fn parse(s: &str) -> Result<EmulatedLink> {
        let bad = |d: &str| EngineError::Config { key: "link".into(), detail: format!("'{s}': {d} (expected e.g. 5gbps,50us)") };
        let (bw, lat) = s.split_once(',').unwrap_or((s, "0us"));
        let num = |v: &str, unit: &str| v.trim().strip_suffix(unit).and_then(|n| n.trim().parse::<f64>().ok());
        let gbps = num(bw, "gbps").or_else(|| num(bw, "mbps").map(|m| m / 1e3)).ok_or_else(|| bad("bandwidth needs gbps or mbps"))?;
        let latency_us = num(lat, "us").or_else(|| num(lat, "ms").map(|m| m * 1e3)).ok_or_else(|| bad("latency needs us or ms"))?;
        EmulatedLink::new(gbps, latency_us).map_err(|e| bad(&e.to_string()))
    }

    /// How long `bytes` take: latency plus serialization.
    pub fn transfer_time(&self, bytes: u64) -> Duration {
        // within the bounds at most 2^64 bytes at 1 kbit/s, 1.5e17 s: below
        // `Duration::MAX`; a link built without `new` saturates there
        Duration::try_from_secs_f64(self.latency_us * 1e-6 + bytes as f64 * 8.0 / (self.gbps * 1e9)).unwrap_or(Duration::MAX)
    }
}

/// The emulated links of a session: one for every pair, and overrides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkMap {
    /// The link of every ordered device pair without an override.
    pub all: Option<EmulatedLink>,
    /// Per ordered pair (source device, destination device), full names.
    pub pairs: HashMap<(String, String), EmulatedLink>,
}

impl LinkMap {
    pub fn is_empty(&self) -> bool {
        self.all.is_none() && self.pairs.is_empty()
    }
    fn link(&self, src: &str, dst: &str) -> Option<EmulatedLink> {
        self.pairs.get(&(src.to_string(), dst.to_string())).copied().or(self.all)
    }
}

/// A tensor waiting for its delivery time.
pub(crate) struct Pending {
    at: Instant,
    seq: u64,
    key: RendezvousKey,
    wire: Tensor,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    /// Reversed: the heap's top is the earliest delivery.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

pub(crate) enum Msg {
    Deliver(Pending),
    Stop,
}

/// One step's deliveries over emulated links.
pub(crate) struct LinkDelivery<'a> {
    links: Cow<'a, LinkMap>,
    /// Per (source, destination): when its last transfer is delivered.
    free_at: Mutex<HashMap<(String, String), Instant>>,
    tx: Mutex<Sender<Msg>>,
    seq: std::sync::atomic::AtomicU64,
}

impl<'a> LinkDelivery<'a> {
    /// The step's delivery state and the receiver its thread runs on.
    pub fn new(links: &'a LinkMap) -> (LinkDelivery<'a>, Receiver<Msg>) {
        LinkDelivery::with(Cow::Borrowed(links))
    }

    fn with(links: Cow<'a, LinkMap>) -> (LinkDelivery<'a>, Receiver<Msg>) {
        let (tx, rx) = channel();
        (LinkDelivery { links, free_at: Mutex::new(HashMap::new()), tx: Mutex::new(tx), seq: Default::default() }, rx)
    }

    /// Takes over a Send's tensor when its pair has an emulated link
    /// (returns it back otherwise).
    pub fn send(&self, key: &RendezvousKey, wire: Tensor) -> Option<Tensor> {
        let (src, dst) = (key.src_device.to_string(), key.dst_device.to_string());
        let Some(link) = self.links.link(&src, &dst) else { return Some(wire) };
        let now = Instant::now();
        let at = {
            let mut free = self.free_at.lock();
            let start = free.get(&(src.clone(), dst.clone())).map_or(now, |&f| f.max(now));
            let at = start + link.transfer_time(wire.size_in_bytes() as u64);
            free.insert((src, dst), at);
            at
        };
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let msg = Msg::Deliver(Pending { at, seq, key: key.clone(), wire });
        // The delivery thread lives as long as the step; a closed channel
        // means the step is over and nobody waits for this tensor.
        let _ = self.tx.lock().send(msg);
        None
    }

    /// Ends the delivery thread (after the step's partitions finished).
    pub fn stop(&self) {
        let _ = self.tx.lock().send(Msg::Stop);
    }
}

/// Emulated links in front of a rendezvous that outlives steps: a task of
/// a cluster, whose Sends to other tasks' devices leave tensors in its own
/// rendezvous for the consumers to take. [`LinkEmulator::send`] holds such
/// a tensor back until its delivery time under the module's contract (the
/// pair's queue spanning steps), then leaves it in the rendezvous; the
/// consumer's own fetch of it (a `RecvTensor` call over the real network)
/// comes on top. The delivery thread ends with [`LinkEmulator::stop`] or
/// when the emulator is dropped; tensors not yet delivered then are
/// dropped (their steps are over).
pub struct LinkEmulator {
    delivery: LinkDelivery<'static>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl LinkEmulator {
    /// Starts the delivery thread in front of `rdv`.
    pub fn start(links: LinkMap, rdv: Arc<dyn Rendezvous>) -> Result<LinkEmulator> {
        let (delivery, rx) = LinkDelivery::with(Cow::Owned(links));
        let thread = std::thread::Builder::new()
            .name("flowlab-links".into())
            .spawn(move || deliver(rx, rdv.as_ref()))
            .map_err(|e| EngineError::Device(format!("cannot start the emulated links' delivery thread: {e}")))?;
        Ok(LinkEmulator { delivery, thread: Mutex::new(Some(thread)) })
    }

    /// The links emulated.
    pub fn links(&self) -> &LinkMap {
        &self.delivery.links
    }

    /// Takes over `wire`, sent under `key`, when the key's device pair has a
    /// link (it reaches the rendezvous at its delivery time); gives it back
    /// when the pair has none (the caller sends it at once).
    pub fn send(&self, key: &RendezvousKey, wire: Tensor) -> Option<Tensor> {
        self.delivery.send(key, wire)
    }

    /// Ends the delivery thread (waiting for it: it ends at once).
    pub fn stop(&self) {
        self.delivery.stop();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for LinkEmulator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The delivery thread: hands each tensor to the rendezvous at its time.
pub(crate) fn deliver(rx: Receiver<Msg>, rdv: &dyn Rendezvous) {
    let mut heap: BinaryHeap<Pending> = BinaryHeap::new();
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|p| p.at <= now) {
            if let Some(p) = heap.pop() {
                // A failed send means the step was aborted: nothing to do.
                let _ = rdv.send(&p.key, p.wire);
            }
        }
        let msg = match heap.peek() {
            Some(p) => match rx.recv_timeout(p.at.saturating_duration_since(now)) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(m) => m,
                Err(_) => return,
            },
        };
        match msg {
            Msg::Deliver(p) => heap.push(p),
            Msg::Stop => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse_with_units_and_refuse_nonsense() {
        assert_eq!(EmulatedLink::parse("5gbps,50us").unwrap(), EmulatedLink { gbps: 5.0, latency_us: 50.0 });
        assert_eq!(EmulatedLink::parse("100mbps,2ms").unwrap(), EmulatedLink { gbps: 0.1, latency_us: 2000.0 });
        assert_eq!(EmulatedLink::parse("10gbps").unwrap(), EmulatedLink { gbps: 10.0, latency_us: 0.0 });
        let e = EmulatedLink::parse("0gbps,5us").unwrap_err().to_string();
        assert!(e.contains("link.gbps: must be a bandwidth from 1e-6 to 1e6 Gbit/s, got 0"), "{e}");
        for (bad, want) in [
            ("1e-300gbps,1us", "link.gbps: must be a bandwidth from 1e-6 to 1e6 Gbit/s, got 1e-300"),
            ("NaNgbps,1us", "got NaN"),
            ("1gbps,1e300us", "link.latency_us: must be from 0 to 1e7 us (10 s), got 1e300"),
            ("1gbps,-1us", "got -1"),
        ] {
            let e = EmulatedLink::parse(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
        // the slowest link's largest transfer still has a delay
        // (2^64 bytes x 8 bits at 1,000 bit/s, plus 10 s: 1.4757e17 s)
        let slowest = EmulatedLink::new(MIN_LINK_GBPS, MAX_LINK_LATENCY_US).unwrap().transfer_time(u64::MAX).as_secs_f64();
        assert!((slowest / (2f64.powi(64) * 8.0 / 1e3 + 10.0) - 1.0).abs() < 1e-12, "{slowest}");
        assert_eq!(EmulatedLink { gbps: 1e-300, latency_us: 0.0 }.transfer_time(1), Duration::MAX);
        assert!(EmulatedLink::parse("5,50").is_err());
        // 1 MB at 8 Gbit/s is 1 ms, plus 0.5 ms latency.
        let t = EmulatedLink::new(8.0, 500.0).unwrap().transfer_time(1_000_000);
        assert!((t.as_secs_f64() - 1.5e-3).abs() < 1e-12, "{t:?}");
    }

    /// A task's emulator: a pair's transfers queue one behind the other
    /// across steps, another pair is not held up by them, a pair without a
    /// link is handed back, and nothing arrives early.
    #[test]
    fn an_emulator_delivers_in_queue_order_and_never_early() {
        use crate::framework::rendezvous::LocalRendezvous;
        use crate::framework::DeviceName;
        let dev = |s: &str| DeviceName::parse(s).unwrap();
        let (a, b, c) = (dev("/job:ps/task:0/device:cpu:0"), dev("/job:worker/task:0/device:cpu:0"), dev("/job:worker/task:1/device:cpu:0"));
        let key = |dst: &DeviceName, step: u64| RendezvousKey { src_device: a.clone(), dst_device: dst.clone(), edge: "w:0".into(), step_id: step };
        // 0.08 Gbit/s: 10,000 bytes take 1 ms, plus 2 ms latency
        let mut links = LinkMap { all: None, ..Default::default() };
        links.pairs.insert((a.to_string(), b.to_string()), EmulatedLink::new(0.08, 2000.0).unwrap());
        let rdv = Arc::new(LocalRendezvous::new());
        let em = LinkEmulator::start(links, rdv.clone()).unwrap();
        let t = Tensor::from_vec(vec![0f32; 2500], vec![2500]).unwrap();
        let start = Instant::now();
        // two steps' tensors on a -> b: the second queues behind the first
        assert!(em.send(&key(&b, 1), t.clone()).is_none());
        assert!(em.send(&key(&b, 2), t.clone()).is_none());
        // a -> c has no link: handed back
        assert!(em.send(&key(&c, 1), t.clone()).is_some());
        rdv.recv(&key(&b, 1), Duration::from_secs(5)).unwrap();
        let first = start.elapsed();
        rdv.recv(&key(&b, 2), Duration::from_secs(5)).unwrap();
        let second = start.elapsed();
        assert!(first >= Duration::from_micros(3000), "{first:?}");
        assert!(second >= Duration::from_micros(6000), "{second:?}");
        assert!(second < Duration::from_millis(500), "{second:?}");
        em.stop();
        // after stop nothing is delivered, and stopping twice is harmless
        assert!(em.send(&key(&b, 3), t).is_none());
        drop(em);
        assert!(rdv.recv(&key(&b, 3), Duration::from_millis(20)).is_err());
    }
}
