//! `RecvTensor` without tonic's message copies, as TensorFlow's own gRPC
//! runtime does it (`grpc_tensor_coding.cc` and `tensor_coding.cc`): the
//! answer's tensor bytes go out as they lie in the tensor's storage, and a
//! receiver copies them once, from the HTTP/2 frames into the tensor it
//! hands the executor.
//!
//! Through tonic's codec a weight matrix was copied three times in user
//! space: encoded into the answer's buffer, gathered from the frames into
//! the receiver's message buffer, and out of that (unaligned) buffer into
//! the tensor. A 1.6 MB `RecvTensor` took 1.4-3.3 ms on loopback against
//! 0.7 ms for the same bytes over a bare TCP socket with two copies.
//!
//! Contract: the bytes on the wire are the gRPC message tonic would send
//! (`prost` encodes a `RecvTensorResponse` with its fields in this order,
//! the data last), so either side still talks to a stock gRPC peer; a
//! message laid out otherwise is read whole and decoded by `prost`. Every
//! other method of the worker service is tonic's.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use flowlab_engine::{DType, Tensor};
use half::{bf16, f16};
use http_body::Frame;
use http_body_util::BodyExt;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;

use crate::pb::worker_server::WorkerServer;
use crate::pb::{RecvTensorRequest, RecvTensorResponse, TensorProto};
use crate::auth::AuthChannel;
use crate::wire;
use crate::worker::{WorkerService, error_chain};

/// The method's HTTP/2 path.
const PATH: &str = "/flowlab.Worker/RecvTensor";

/// The answer to a `RecvTensor` carrying `t` as two pieces of one gRPC
/// message: the head (the 5-byte gRPC prefix and every field up to the
/// data's length) and the data, which shares `t`'s storage.
pub(crate) fn answer_pieces(t: &Tensor) -> crate::Result<(Bytes, Bytes)> {
    let p = wire::to_proto(t)?;
    let data = p.data;
    // prost leaves out an empty `bytes` field, so this is every field
    // before the data, as prost orders them
    let mut tensor_head = TensorProto { dtype: p.dtype, dims: p.dims, data: Bytes::new() }.encode_to_vec();
    if !data.is_empty() {
        encode_key(3, WireType::LengthDelimited, &mut tensor_head);
        encode_varint(data.len() as u64, &mut tensor_head);
    }
    let tensor_len = (tensor_head.len() + data.len()) as u64;
    let mut message_head = Vec::with_capacity(12);
    encode_key(1, WireType::LengthDelimited, &mut message_head);
    encode_varint(tensor_len, &mut message_head);
    let message_len = u32::try_from(message_head.len() as u64 + tensor_len).map_err(|_| crate::RuntimeError::Message {
        message: format!("a tensor of {} bytes does not fit one gRPC message (4 GiB at most)", data.len()),
    })?;
    let mut head = BytesMut::with_capacity(5 + message_head.len() + tensor_head.len());
    head.put_u8(0);
    head.put_u32(message_len);
    head.put_slice(&message_head);
    head.put_slice(&tensor_head);
    Ok((head.freeze(), data))
}

/// An answer's body: the head, the data, then the `grpc-status` trailer.
struct AnswerBody {
    pieces: [Option<Bytes>; 2],
    trailers: Option<http::HeaderMap>,
}

/// Data up to this size go out in the head's frame: copying them costs
/// less than a second frame.
const SMALL: usize = 16 << 10;

impl AnswerBody {
    fn new(head: Bytes, data: Bytes) -> AnswerBody {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let pieces = if data.len() <= SMALL {
            [Some([head.as_ref(), data.as_ref()].concat().into()), None]
        } else {
            [Some(head), Some(data)]
        };
        AnswerBody { pieces, trailers: Some(trailers) }
    }
}

impl http_body::Body for AnswerBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if let Some(b) = this.pieces.iter_mut().find_map(Option::take) {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.iter().all(Option::is_none) && self.trailers.is_none()
    }
}

/// The worker service's routes: `RecvTensor` answered here, every other
/// method by tonic's generated server.
#[derive(Clone)]
pub(crate) struct WorkerRoutes {
    service: WorkerService,
    tonic: WorkerServer<WorkerService>,
}

impl WorkerRoutes {
    pub(crate) fn new(service: WorkerService) -> WorkerRoutes {
        let limit = service.max_message_bytes();
        let tonic = WorkerServer::new(service.clone()).max_decoding_message_size(limit).max_encoding_message_size(usize::MAX);
        WorkerRoutes { service, tonic }
    }
}

impl NamedService for WorkerRoutes {
    const NAME: &'static str = <WorkerServer<WorkerService> as NamedService>::NAME;
}

impl Service<http::Request<Body>> for WorkerRoutes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<Body>, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // before anything of the request is read or answered
        if let Some(auth) = self.service.auth()
            && !auth.admits(req.headers())
        {
            return Box::pin(async { Ok(crate::auth::refusal().into_http()) });
        }
        if req.uri().path() != PATH {
            let limit = self.service.max_message_bytes();
            return self.tonic.call(req.map(|body| Body::new(LimitedMessage { body, limit, prefix: [0; 5], seen: 0 })));
        }
        let service = self.service.clone();
        Box::pin(async move {
            Ok(match answer(&service, req).await {
                Ok((head, data)) => {
                    let mut resp = http::Response::new(Body::new(AnswerBody::new(head, data)));
                    resp.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
                    resp
                }
                Err(status) => status.into_http(),
            })
        })
    }
}

/// A request body whose gRPC message is refused from its 5-byte prefix
/// when it declares more than `limit` bytes: the error (a
/// `RESOURCE_EXHAUSTED` status, which tonic's decoder passes on) comes
/// before tonic buffers the message. tonic's own limit answers
/// `OUT_OF_RANGE`, where gRPC's is `RESOURCE_EXHAUSTED`.
struct LimitedMessage {
    body: Body,
    limit: usize,
    /// The prefix's bytes so far, and how many (no allocation per request).
    prefix: [u8; 5],
    seen: usize,
}

impl http_body::Body for LimitedMessage {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let frame = match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => f,
            other => return other,
        };
        if this.seen < 5
            && let Some(data) = frame.data_ref()
        {
            let n = (5 - this.seen).min(data.len());
            this.prefix[this.seen..this.seen + n].copy_from_slice(&data[..n]);
            this.seen += n;
            if this.seen == 5 {
                let len = u32::from_be_bytes([this.prefix[1], this.prefix[2], this.prefix[3], this.prefix[4]]) as usize;
                if len > this.limit {
                    return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                        "a request of {len} bytes; this cluster's tasks read at most {} bytes (max_message_mb in the cluster file)",
                        this.limit
                    )))));
                }
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
}

/// The largest `RecvTensor` request read: its fields are two device names,
/// an edge name and a few numbers. A larger one is refused unread.
pub(crate) const MAX_RECV_REQUEST: usize = 64 << 10;

async fn answer(service: &WorkerService, req: http::Request<Body>) -> Result<(Bytes, Bytes), Status> {
    let body = http_body_util::Limited::new(req.into_body(), MAX_RECV_REQUEST);
    let body = body.collect().await.map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            Status::resource_exhausted(format!("a RecvTensor request is at most {MAX_RECV_REQUEST} bytes"))
        } else {
            Status::internal("RecvTensor request: the body could not be read")
        }
    })?.to_bytes();
    let message = unframe(&body).map_err(Status::invalid_argument)?;
    let r = RecvTensorRequest::decode(message).map_err(|e| Status::invalid_argument(format!("RecvTensor request: {e}")))?;
    let t = service.recv_tensor_value(r).await?;
    let (head, data) = answer_pieces(&t).map_err(|e| Status::internal(e.to_string()))?;
    service.count_served(data.len());
    Ok((head, data))
}

/// The one message of a gRPC body.
fn unframe(body: &[u8]) -> Result<&[u8], String> {
    let (prefix, message) = body.split_at_checked(5).ok_or_else(|| format!("a gRPC body of {} bytes has no message prefix", body.len()))?;
    if prefix[0] != 0 {
        return Err("compressed gRPC messages are not supported".into());
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len != message.len() {
        return Err(format!("a gRPC message of {len} bytes arrived with {} bytes", message.len()));
    }
    Ok(message)
}

/// `message` behind its gRPC prefix (uncompressed, its length).
fn framed(message: &[u8]) -> Bytes {
    let mut body = BytesMut::with_capacity(5 + message.len());
    body.put_u8(0);
    body.put_u32(message.len() as u32);
    body.put_slice(message);
    body.freeze()
}

/// Calls `RecvTensor` on `channel` and builds the answer's tensor from the
/// frames as they arrive.
pub(crate) async fn call(mut channel: AuthChannel, req: &RecvTensorRequest, limit: usize) -> Result<Tensor, Status> {
    let mut request = http::Request::new(Body::new(http_body_util::Full::new(framed(&req.encode_to_vec()))));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = http::Uri::from_static(PATH);
    *request.version_mut() = http::Version::HTTP_2;
    request.headers_mut().insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    request.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    std::future::poll_fn(|cx| channel.poll_ready(cx)).await.map_err(|e| Status::unavailable(error_chain(&e)))?;
    let response = channel.call(request).await.map_err(|e| Status::unavailable(error_chain(&e)))?;
    // an error comes as headers only
    let mut status = Status::from_header_map(response.headers());
    if let Some(s) = status.take_if(|s| s.code() != tonic::Code::Ok) {
        return Err(s);
    }
    if response.status() != http::StatusCode::OK {
        return Err(Status::unknown(format!("RecvTensor answered HTTP status {}", response.status())));
    }
    let mut body = response.into_body();
    let mut reader = TensorReader { limit, ..TensorReader::default() };
    while let Some(frame) = body.frame().await {
        match frame?.into_data() {
            Ok(data) => reader.push(&data).map_err(Status::resource_exhausted)?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    status = Status::from_header_map(&trailers);
                }
            }
        }
    }
    match status {
        Some(s) if s.code() != tonic::Code::Ok => Err(s),
        Some(_) => reader.finish().map_err(Status::internal),
        None => Err(Status::internal("RecvTensor answer without a grpc-status")),
    }
}

/// Elements written byte by byte into a vector of their own type (aligned,
/// unlike the frames), as frames bring them.
trait Fill: Send {
    fn write(&mut self, bytes: &[u8]);
    fn into_tensor(self: Box<Self>, dims: Vec<usize>) -> crate::Result<Tensor>;
}

struct Filler<T> {
    elements: Vec<T>,
    bytes: usize,
}

impl<T: flowlab_engine::Element + bytemuck::Pod> Filler<T> {
    fn boxed(len: usize) -> Box<dyn Fill> {
        Box::new(Filler::<T> { elements: Vec::with_capacity(len / std::mem::size_of::<T>()), bytes: 0 })
    }
}

impl<T: flowlab_engine::Element + bytemuck::Pod> Fill for Filler<T> {
    fn write(&mut self, bytes: &[u8]) {
        let room = self.elements.capacity() * std::mem::size_of::<T>() - self.bytes;
        let n = bytes.len().min(room);
        // SAFETY: the vector's buffer holds `capacity * size_of::<T>()`
        // bytes, of which `self.bytes` are written; `n` more fit, and the
        // frame's bytes do not overlap the vector's own buffer.
        unsafe {
            let dst = self.elements.as_mut_ptr().cast::<u8>().add(self.bytes);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, n);
        }
        self.bytes += n;
    }

    fn into_tensor(mut self: Box<Self>, dims: Vec<usize>) -> crate::Result<Tensor> {
        let len = self.elements.capacity();
        if self.bytes != len * std::mem::size_of::<T>() {
            return Err(crate::RuntimeError::Message { message: format!("RecvTensor answer: {} of {} data bytes written", self.bytes, len * std::mem::size_of::<T>()) });
        }
        // SAFETY: all `len * size_of::<T>()` bytes were written (checked
        // above), and every bit pattern is a valid `T` (`T: Pod`).
        unsafe { self.elements.set_len(len) };
        Tensor::from_vec(std::mem::take(&mut self.elements), dims).map_err(|e| crate::RuntimeError::Engine { message: e.to_string() })
    }
}

/// An answer read frame by frame: the head gathered until the data's
/// length is known, then the data copied straight into its tensor.
pub(crate) struct TensorReader {
    /// The bytes before the data; all of them when the message is read
    /// whole.
    head: Vec<u8>,
    data: Option<Data>,
    whole: bool,
    /// The most bytes a message may have: a larger tensor is refused
    /// before its buffer is allocated.
    limit: usize,
}

impl Default for TensorReader {
    fn default() -> TensorReader {
        TensorReader { head: Vec::new(), data: None, whole: false, limit: usize::MAX }
    }
}

struct Data {
    fill: Box<dyn Fill>,
    dims: Vec<usize>,
    left: usize,
}

/// What the bytes so far say of the message.
enum Head {
    /// Too few bytes to tell.
    More,
    /// The tensor's data are the message's last `len` bytes, from `at`.
    Data { at: usize, len: usize, dtype: String, dims: Vec<u64> },
    /// Read it whole and let `prost` decode it.
    Whole,
}

impl TensorReader {
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<(), String> {
        if let Some(d) = &mut self.data {
            if bytes.len() > d.left {
                return Err(format!("RecvTensor answer runs {} bytes past its message", bytes.len() - d.left));
            }
            d.fill.write(bytes);
            d.left -= bytes.len();
            return Ok(());
        }
        if self.whole {
            if self.head.len() + bytes.len() > self.limit {
                return Err(format!("RecvTensor answer larger than the cluster's message limit of {} bytes", self.limit));
            }
            self.head.extend_from_slice(bytes);
            return Ok(());
        }
        // the head is read where it lies: in the frame itself when it
        // starts the message (the first frame holds a megabyte of data,
        // which must not be copied into the head on the way)
        let gathered = !self.head.is_empty();
        if gathered {
            self.head.extend_from_slice(bytes);
        }
        let view: &[u8] = if gathered { &self.head } else { bytes };
        // where the data start, once the head says how to read them
        let start = match parse_head(view) {
            Head::More => None,
            Head::Whole => {
                self.whole = true;
                None
            }
            Head::Data { len, .. } if len > self.limit => {
                return Err(format!("RecvTensor answer of a {len}-byte tensor: the cluster's message limit is {} bytes (max_message_mb in the cluster file)", self.limit));
            }
            Head::Data { at, len, dtype, dims } => {
                let (dtype, dims) = wire::checked(&dtype, &dims, len).map_err(|e| e.to_string())?;
                let fill = match dtype {
                    DType::F32 => Some(Filler::<f32>::boxed(len)),
                    DType::F64 => Some(Filler::<f64>::boxed(len)),
                    DType::F16 => Some(Filler::<f16>::boxed(len)),
                    DType::BF16 => Some(Filler::<bf16>::boxed(len)),
                    DType::I8 => Some(Filler::<i8>::boxed(len)),
                    DType::I32 => Some(Filler::<i32>::boxed(len)),
                    DType::I64 => Some(Filler::<i64>::boxed(len)),
                    DType::Bool => None,
                };
                self.whole = fill.is_none();
                fill.map(|fill| {
                    self.data = Some(Data { fill, dims, left: len });
                    at
                })
            }
        };
        match start {
            // the head (or the whole message) so far, kept for the next frame
            None if !gathered => {
                self.head.extend_from_slice(bytes);
                Ok(())
            }
            None => Ok(()),
            Some(at) if gathered => {
                let head = std::mem::take(&mut self.head);
                self.push(&head[at..])
            }
            Some(at) => self.push(&bytes[at..]),
        }
    }

    pub(crate) fn finish(self) -> Result<Tensor, String> {
        if let Some(d) = self.data {
            if d.left > 0 {
                return Err(format!("RecvTensor answer ended {} bytes short of its tensor", d.left));
            }
            return d.fill.into_tensor(d.dims).map_err(|e| e.to_string());
        }
        let message = unframe(&self.head)?;
        let r = RecvTensorResponse::decode(message).map_err(|e| format!("RecvTensor answer: {e}"))?;
        let p = r.tensor.ok_or("RecvTensor answer without a tensor")?;
        wire::from_proto(&p).map_err(|e| e.to_string())
    }
}

/// A varint at the start of `b` (prost's decoder), and its length;
/// `None` if `b` ends first or it is not a varint.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut rest = b;
    let v = prost::encoding::decode_varint(&mut rest).ok()?;
    Some((v, b.len() - rest.len()))
}

/// Where the data of the answer starting `b` lie, if it is laid out as
/// `prost` writes it: one `tensor` field holding `dtype`, `dims` (packed)
/// and then `data`, which ends the message.
fn parse_head(b: &[u8]) -> Head {
    let Some(prefix) = b.get(..5) else { return Head::More };
    let message_end = 5 + u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    // a malformed head of a complete message is prost's to report
    let short = || if b.len() >= message_end { Head::Whole } else { Head::More };
    if prefix[0] != 0 {
        return Head::Whole;
    }
    let mut at = 5;
    let field = |at: &mut usize, b: &[u8]| -> Option<(u64, u64)> {
        let (key, n) = varint(b.get(*at..)?)?;
        let (len, m) = varint(b.get(*at + n..)?)?;
        *at += n + m;
        Some((key, len))
    };
    // RecvTensorResponse.tensor, to the message's end
    match field(&mut at, b) {
        None => return short(),
        Some((key, len)) if key == (1 << 3 | 2) && (at as u64).checked_add(len) == Some(message_end as u64) => {}
        Some(_) => return Head::Whole,
    }
    let (mut dtype, mut dims) = (None, Vec::new());
    loop {
        let Some((key, len)) = field(&mut at, b) else { return short() };
        let Some(end) = usize::try_from(len).ok().and_then(|len| at.checked_add(len)) else { return Head::Whole };
        let len = end - at;
        match key {
            // dtype
            k if k == (1 << 3 | 2) => {
                let Some(s) = b.get(at..end) else { return short() };
                let Ok(s) = std::str::from_utf8(s) else { return Head::Whole };
                dtype = Some(s.to_string());
            }
            // dims, packed
            k if k == (2 << 3 | 2) => {
                let Some(mut packed) = b.get(at..end) else { return short() };
                while !packed.is_empty() {
                    let Some((d, n)) = varint(packed) else { return Head::Whole };
                    dims.push(d);
                    packed = &packed[n..];
                }
            }
            // data, the last field
            k if k == (3 << 3 | 2) && end == message_end => {
                return match dtype {
                    Some(dtype) => Head::Data { at, len, dtype, dims },
                    None => Head::Whole,
                };
            }
            _ => return Head::Whole,
        }
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prost_answer(t: &Tensor) -> Vec<u8> {
        framed(&RecvTensorResponse { tensor: Some(wire::to_proto(t).unwrap()) }.encode_to_vec()).to_vec()
    }

    fn tensors() -> Vec<Tensor> {
        let raw: Vec<f64> = (0..300).map(|i| f64::from(i) * 0.37 - 40.0).collect();
        let mut ts: Vec<Tensor> = [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32, DType::I64, DType::Bool]
            .into_iter()
            .map(|d| Tensor::from_f64s(d, &raw, vec![3, 100]).unwrap())
            .collect();
        ts.push(Tensor::from_vec(Vec::<f32>::new(), vec![0, 4]).unwrap());
        ts.push(Tensor::from_vec(vec![2.5f32], vec![]).unwrap());
        ts.push(Tensor::from_vec((0..200_000).map(|i| i as f32).collect::<Vec<f32>>(), vec![400, 500]).unwrap());
        ts
    }

    #[test]
    fn the_answer_is_the_message_prost_writes() {
        for t in tensors() {
            let (head, data) = answer_pieces(&t).unwrap();
            let wire: Vec<u8> = [head.as_ref(), data.as_ref()].concat();
            assert_eq!(wire, prost_answer(&t), "{} {:?}", t.dtype(), t.dims());
        }
    }

    /// The reader against prost's decoder and `from_proto`, with the
    /// message cut into frames at every offset of its head and at random
    /// offsets through its data.
    #[test]
    fn a_reader_gives_the_tensor_prost_decodes_however_the_frames_fall() {
        for t in tensors() {
            let wire = prost_answer(&t);
            let want = wire::to_proto(&wire::from_proto(&RecvTensorResponse::decode(&wire[5..]).unwrap().tensor.unwrap()).unwrap()).unwrap();
            let mut cuts: Vec<usize> = (0..wire.len().min(40)).collect();
            cuts.extend([wire.len() / 3, wire.len() - 1, wire.len()]);
            for cut in cuts {
                for step in [1usize, 7, 4096, usize::MAX] {
                    let mut r = TensorReader::default();
                    r.push(&wire[..cut]).unwrap();
                    for chunk in wire[cut..].chunks(step.min(wire.len()).max(1)) {
                        r.push(chunk).unwrap();
                    }
                    // prost's layout is read straight into the tensor, not whole
                    let direct = t.dtype() != DType::Bool && t.dims().iter().product::<usize>() > 0;
                    assert_eq!(r.data.is_some(), direct, "{} {:?}", t.dtype(), t.dims());
                    let got = wire::to_proto(&r.finish().unwrap()).unwrap();
                    assert_eq!(got, want, "{} {:?}, cut at {cut}, frames of {step}", t.dtype(), t.dims());
                }
            }
        }
    }

    #[test]
    fn a_message_prost_lays_out_otherwise_is_still_read() {
        let t = Tensor::from_vec(vec![1.0f32, -2.0, 3.5], vec![3]).unwrap();
        // data before dims: legal protobuf that prost does not write
        let mut tensor = Vec::new();
        encode_key(3, WireType::LengthDelimited, &mut tensor);
        encode_varint(12, &mut tensor);
        tensor.extend(t.as_slice::<f32>().unwrap().iter().flat_map(|v| v.to_le_bytes()));
        encode_key(1, WireType::LengthDelimited, &mut tensor);
        encode_varint(3, &mut tensor);
        tensor.extend_from_slice(b"f32");
        encode_key(2, WireType::LengthDelimited, &mut tensor);
        encode_varint(1, &mut tensor);
        tensor.push(3);
        let mut message = Vec::new();
        encode_key(1, WireType::LengthDelimited, &mut message);
        encode_varint(tensor.len() as u64, &mut message);
        message.extend(tensor);
        let wire = framed(&message);
        let mut r = TensorReader::default();
        for b in wire.chunks(5) {
            r.push(b).unwrap();
        }
        let got = r.finish().unwrap();
        assert_eq!(got.dims(), &[3]);
        assert_eq!(got.as_slice::<f32>().unwrap(), &[1.0, -2.0, 3.5]);
    }

    #[test]
    fn a_short_long_or_malformed_answer_is_an_error_naming_it() {
        let t = Tensor::from_vec(vec![1.0f32; 1000], vec![10, 100]).unwrap();
        let wire = prost_answer(&t);
        let mut r = TensorReader::default();
        r.push(&wire[..wire.len() - 8]).unwrap();
        assert_eq!(r.finish().unwrap_err(), "RecvTensor answer ended 8 bytes short of its tensor");
        let mut r = TensorReader::default();
        r.push(&wire).unwrap();
        assert_eq!(r.push(&[0, 0]).unwrap_err(), "RecvTensor answer runs 2 bytes past its message");
        // dims that do not match the bytes: from_proto's own message
        let mut p = wire::to_proto(&t).unwrap();
        p.dims = vec![10, 99];
        let bad = framed(&RecvTensorResponse { tensor: Some(p) }.encode_to_vec());
        let e = TensorReader::default().push(&bad).unwrap_err();
        assert!(e.contains("carries 4000 bytes") && e.contains("[10, 99]"), "{e}");
        // a message too short for its own prefix
        let mut r = TensorReader::default();
        r.push(&wire[..3]).unwrap();
        assert_eq!(r.finish().unwrap_err(), "a gRPC body of 3 bytes has no message prefix");
    }
}
