//! Safe Rust API of libmor: Mixture-of-Recursions language models on CPUs.
//!
//! ```no_run
//! let model = mor::Model::load_file("model.gguf", &mor::ModelParams::default())?;
//! let mut ctx = mor::Context::new(&model, &mor::ContextParams::default())?;
//! let mut sampler = mor::Sampler::greedy()?;
//! for step in ctx.generate(&[14, 148, 141], 8, &mut sampler)? {
//!     let step = step?;
//!     println!("token {} ran {} recursions", step.token, step.depth);
//! }
//! # Ok::<(), mor::Error>(())
//! ```
//!
//! Ownership follows mor.h: a [`Model`] is immutable and `Send + Sync` (share
//! it by reference or in an `Arc`); a [`Context`] borrows its model, is `Send`
//! but not `Sync` (one thread at a time), and owns its KV cache and router,
//! reached through `&mut` borrows ([`Context::kv`], [`Context::router`]).
//! Every handle is freed by `Drop`. Every failing call returns an [`Error`]
//! with the library's status and message.
//!
//! A context cannot outlive its model:
//!
//! ```compile_fail,E0597
//! let ctx = {
//!     let model = mor::Model::load_file("m.gguf", &Default::default()).unwrap();
//!     mor::Context::new(&model, &Default::default()).unwrap()
//! };
//! ```
//!
//! and logits cannot be held across the next decode:
//!
//! ```compile_fail,E0502
//! fn f(ctx: &mut mor::Context, b: &mor::Batch) {
//!     let l = ctx.logits(0).unwrap();
//!     ctx.decode(b).unwrap();
//!     println!("{}", l[0]);
//! }
//! ```
use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_void};
use std::path::Path;
use std::ptr::{self, NonNull};

pub use mor_sys as sys;

/// A token id.
pub type Token = i32;

/// What went wrong: one variant per `MOR_E_*` status, `Unknown` for a status
/// this crate does not know (a newer library).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidArg,
    NoMem,
    Io,
    Format,
    Unsupported,
    KvFull,
    Aborted,
    Abi,
    OutOfRange,
    Position,
    BufferTooSmall,
    Internal,
    Unknown(i32),
}

impl ErrorKind {
    pub fn from_status(status: i32) -> ErrorKind {
        use ErrorKind::*;
        match status {
            -1 => InvalidArg,
            -2 => NoMem,
            -3 => Io,
            -4 => Format,
            -5 => Unsupported,
            -6 => KvFull,
            -7 => Aborted,
            -8 => Abi,
            -9 => OutOfRange,
            -10 => Position,
            -11 => BufferTooSmall,
            -12 => Internal,
            s => Unknown(s),
        }
    }

    /// The `mor_status` value.
    pub fn status(self) -> i32 {
        use ErrorKind::*;
        match self {
            InvalidArg => -1,
            NoMem => -2,
            Io => -3,
            Format => -4,
            Unsupported => -5,
            KvFull => -6,
            Aborted => -7,
            Abi => -8,
            OutOfRange => -9,
            Position => -10,
            BufferTooSmall => -11,
            Internal => -12,
            Unknown(s) => s,
        }
    }
}

/// A failed libmor call: the status and `mor_last_error()` of that call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    /// The error of a status just returned by the library (reads the calling
    /// thread's `mor_last_error()`).
    pub fn from_status(status: i32) -> Error {
        let msg = unsafe { cstr(sys::mor_last_error()) };
        Error { kind: ErrorKind::from_status(status), message: msg }
    }

    fn new(kind: ErrorKind, message: &str) -> Error {
        Error { kind, message: message.to_string() }
    }

    /// The status's name, e.g. "MOR_E_FORMAT" ("MOR_E_UNKNOWN" if unknown).
    pub fn name(&self) -> String {
        status_str(self.kind.status())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn check(status: i32) -> Result<i32> {
    if status < 0 { Err(Error::from_status(status)) } else { Ok(status) }
}

unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() { String::new() } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
}

/// The linked library's "MAJOR.MINOR.PATCH".
pub fn version() -> String {
    unsafe { cstr(sys::mor_version_string()) }
}

/// The linked library's version as MAJOR*10000 + MINOR*100 + PATCH.
pub fn version_number() -> u32 {
    unsafe { sys::mor_version_number() }
}

/// One line describing the library's build.
pub fn build_info() -> String {
    unsafe { cstr(sys::mor_build_info()) }
}

/// The name of a status.
pub fn status_str(status: i32) -> String {
    unsafe { cstr(sys::mor_status_str(status)) }
}

/// The largest N_r this build of the library supports.
pub fn max_recursions() -> i32 {
    unsafe { sys::mor_max_recursions() }
}

/// A GBNF grammar (its rule `root`) accepting the JSON texts valid under the
/// JSON Schema `schema` (JSON text); `Err` with kind `InvalidArg`, naming the
/// schema's part, for invalid JSON or a schema the converter refuses
/// (`mor_json_schema_to_grammar`).
pub fn json_schema_to_grammar(schema: &str) -> Result<String> {
    let mut cap = 4096usize;
    loop {
        let mut buf = vec![0u8; cap];
        let mut len = 0usize;
        let st = unsafe {
            sys::mor_json_schema_to_grammar(schema.as_ptr() as *const c_char, schema.len(),
                                            buf.as_mut_ptr() as *mut c_char, cap, &mut len)
        };
        if st == sys::MOR_E_BUFFER_TOO_SMALL && len > cap {
            cap = len;
            continue;
        }
        check(st)?;
        buf.truncate(len);
        return Ok(String::from_utf8(buf).expect("the grammar is UTF-8"));
    }
}

/// Refuse a library whose version (major.minor, the ABI while at 0.x) or
/// params struct sizes differ from the header these bindings were made from.
/// Called by every loader; cheap.
pub fn check_abi() -> Result<()> {
    let v = version_number();
    let (major, minor) = (v / 10000, v / 100 % 100);
    if (major, minor) != (sys::MOR_VERSION_MAJOR, sys::MOR_VERSION_MINOR) {
        return Err(Error::new(
            ErrorKind::Abi,
            &format!("libmor {} linked; these bindings are for {}.{}.x", version(), sys::MOR_VERSION_MAJOR,
                     sys::MOR_VERSION_MINOR),
        ));
    }
    let sizes = unsafe {
        [
            ("mor_model_params", sys::mor_sizeof_model_params(), std::mem::size_of::<sys::mor_model_params>()),
            ("mor_context_params", sys::mor_sizeof_context_params(), std::mem::size_of::<sys::mor_context_params>()),
            ("mor_sampler_params", sys::mor_sizeof_sampler_params(), std::mem::size_of::<sys::mor_sampler_params>()),
            ("mor_router_stats", sys::mor_sizeof_router_stats(), std::mem::size_of::<sys::mor_router_stats>()),
        ]
    };
    for (name, lib, ours) in sizes.iter() {
        if lib != ours {
            return Err(Error::new(ErrorKind::Abi,
                                  &format!("struct skew: {} is {} bytes in libmor, {} in mor-sys", name, lib, ours)));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct ModelParams {
    /// Read the file into memory instead of mapping it.
    pub no_mmap: bool,
    /// Load only the tokenizer.
    pub vocab_only: bool,
}

impl ModelParams {
    fn raw(&self) -> sys::mor_model_params {
        let mut p: sys::mor_model_params = unsafe { std::mem::zeroed() };
        unsafe { sys::mor_model_params_init(&mut p, std::mem::size_of::<sys::mor_model_params>()) };
        if self.no_mmap {
            p.flags |= sys::MOR_MODEL_NO_MMAP as u32;
        }
        if self.vocab_only {
            p.flags |= sys::MOR_MODEL_VOCAB_ONLY as u32;
        }
        p
    }
}

/// An immutable model: weights and hyperparameters. `Send + Sync`.
pub struct Model {
    ptr: NonNull<sys::mor_model>,
    // a model loaded from memory borrows its image until it is freed
    _image: Option<Box<[u8]>>,
}

// mor.h: "a mor_model is immutable once loaded and may be used from any number
// of threads and contexts at once".
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

impl Drop for Model {
    fn drop(&mut self) {
        // Contexts borrow the model, so none is alive here.
        unsafe { sys::mor_model_free(self.ptr.as_ptr()) }
    }
}

macro_rules! getters {
    ($($(#[$doc:meta])* $name:ident => $f:ident -> $t:ty;)*) => {
        $( $(#[$doc])* pub fn $name(&self) -> $t { unsafe { sys::$f(self.ptr.as_ptr()) } } )*
    };
}

impl Model {
    /// Load a GGUF file.
    pub fn load_file<P: AsRef<Path>>(path: P, params: &ModelParams) -> Result<Model> {
        check_abi()?;
        let path = path_cstring(path.as_ref())?;
        let p = params.raw();
        let mut out = ptr::null_mut();
        check(unsafe { sys::mor_model_load_file(path.as_ptr(), &p, &mut out) })?;
        Ok(Model { ptr: NonNull::new(out).expect("libmor returned MOR_OK and no model"), _image: None })
    }

    /// Load a GGUF image from memory; the model keeps the bytes.
    pub fn load_bytes<B: Into<Box<[u8]>>>(image: B, params: &ModelParams) -> Result<Model> {
        check_abi()?;
        let image: Box<[u8]> = image.into();
        let p = params.raw();
        let mut out = ptr::null_mut();
        check(unsafe {
            sys::mor_model_load_memory(image.as_ptr() as *const c_void, image.len(), &p, &mut out)
        })?;
        Ok(Model { ptr: NonNull::new(out).expect("libmor returned MOR_OK and no model"), _image: Some(image) })
    }

    /// The raw handle, for calls into `mor_sys` (borrowed).
    pub fn as_ptr(&self) -> *const sys::mor_model {
        self.ptr.as_ptr()
    }

    getters! {
        n_vocab => mor_model_n_vocab -> i32;
        n_embd => mor_model_n_embd -> i32;
        /// The unrolled depth L.
        n_layer => mor_model_n_layer -> i32;
        /// N_r (1: no recursion).
        n_recursion => mor_model_n_recursion -> i32;
        n_head => mor_model_n_head -> i32;
        n_head_kv => mor_model_n_head_kv -> i32;
        head_dim => mor_model_head_dim -> i32;
        n_ctx_train => mor_model_n_ctx_train -> i32;
        /// `sys::MOR_ROUTER_TYPE_*`.
        router_type => mor_model_router_type -> i32;
        n_boundaries => mor_model_n_boundaries -> i32;
        size_bytes => mor_model_size_bytes -> u64;
    }

    /// The BOS token, if the model has one.
    pub fn token_bos(&self) -> Option<Token> {
        let t = unsafe { sys::mor_model_token_bos(self.ptr.as_ptr()) };
        if t >= 0 { Some(t) } else { None }
    }

    /// The EOS token, if the model has one.
    pub fn token_eos(&self) -> Option<Token> {
        let t = unsafe { sys::mor_model_token_eos(self.ptr.as_ptr()) };
        if t >= 0 { Some(t) } else { None }
    }

    /// Whether the model's texts start with BOS (`mor_model_add_bos`).
    pub fn add_bos(&self) -> bool {
        unsafe { sys::mor_model_add_bos(self.ptr.as_ptr()) != 0 }
    }

    /// A metadata value as text, None if the key does not exist.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        let key = CString::new(key).map_err(|_| Error::new(ErrorKind::InvalidArg, "key contains NUL"))?;
        let mut cap = 256usize;
        loop {
            let mut buf = vec![0u8; cap];
            let mut len = 0usize;
            let st = unsafe {
                sys::mor_model_meta_str(self.ptr.as_ptr(), key.as_ptr(), buf.as_mut_ptr() as *mut c_char, cap, &mut len)
            };
            if st == sys::MOR_E_OUT_OF_RANGE {
                return Ok(None);
            }
            if st == sys::MOR_E_BUFFER_TOO_SMALL && len + 1 > cap {
                cap = len + 1;
                continue;
            }
            check(st)?;
            buf.truncate(len);
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
    }

    /// Token ids of `text` (UTF-8 or any bytes).
    pub fn tokenize<T: AsRef<[u8]>>(&self, text: T, add_bos: bool, parse_special: bool) -> Result<Vec<Token>> {
        let text = text.as_ref();
        let flags = (if add_bos { sys::MOR_TOKENIZE_ADD_BOS } else { 0 }
            | if parse_special { sys::MOR_TOKENIZE_PARSE_SPECIAL } else { 0 }) as u32;
        let mut cap = text.len() + 2;
        loop {
            let mut out = vec![0 as Token; cap];
            let mut n = 0i32;
            let st = unsafe {
                sys::mor_tokenize(self.ptr.as_ptr(), text.as_ptr() as *const c_char, text.len(), flags,
                                  out.as_mut_ptr(), cap as i32, &mut n)
            };
            if st == sys::MOR_E_BUFFER_TOO_SMALL && n as usize > cap {
                cap = n as usize;
                continue;
            }
            check(st)?;
            out.truncate(n as usize);
            return Ok(out);
        }
    }

    /// The bytes of `tokens`, concatenated (a token may end inside a UTF-8
    /// character).
    pub fn detokenize(&self, tokens: &[Token]) -> Result<Vec<u8>> {
        let mut cap = 16 * tokens.len() + 16;
        loop {
            let mut buf = vec![0u8; cap];
            let mut len = 0usize;
            let st = unsafe {
                sys::mor_detokenize(self.ptr.as_ptr(), tokens.as_ptr(), tokens.len() as i32,
                                    buf.as_mut_ptr() as *mut c_char, cap, &mut len)
            };
            if st == sys::MOR_E_BUFFER_TOO_SMALL && len > cap {
                cap = len;
                continue;
            }
            check(st)?;
            buf.truncate(len);
            return Ok(buf);
        }
    }
}

impl Model {
    /// The bytes of one token as they appear inside a text, for printing
    /// tokens one at a time (`detokenize` drops a SentencePiece prefix space).
    pub fn token_to_piece(&self, token: Token) -> Result<Vec<u8>> {
        let mut cap = 64usize;
        loop {
            let mut buf = vec![0u8; cap];
            let mut len = 0usize;
            let st = unsafe {
                sys::mor_token_to_piece(self.ptr.as_ptr(), token, buf.as_mut_ptr() as *mut c_char, cap, &mut len)
            };
            if st == sys::MOR_E_BUFFER_TOO_SMALL && len > cap {
                cap = len;
                continue;
            }
            check(st)?;
            buf.truncate(len);
            return Ok(buf);
        }
    }
}

fn path_cstring(p: &Path) -> Result<CString> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::new(ErrorKind::InvalidArg, "path contains NUL"))
    }
    #[cfg(not(unix))]
    {
        CString::new(p.to_string_lossy().as_bytes())
            .map_err(|_| Error::new(ErrorKind::InvalidArg, "path contains NUL"))
    }
}

// ---------------------------------------------------------------------------
// Batch and Sampler
// ---------------------------------------------------------------------------

/// Tokens to decode, each with its position and sequence. `Send`.
pub struct Batch {
    ptr: NonNull<sys::mor_batch>,
}

unsafe impl Send for Batch {}

impl Drop for Batch {
    fn drop(&mut self) {
        unsafe { sys::mor_batch_free(self.ptr.as_ptr()) }
    }
}

impl Batch {
    pub fn new(capacity: i32) -> Result<Batch> {
        let mut out = ptr::null_mut();
        check(unsafe { sys::mor_batch_create(capacity, &mut out) })?;
        Ok(Batch { ptr: NonNull::new(out).expect("libmor returned MOR_OK and no batch") })
    }

    /// Append a token; `logits` asks the decode for this row's logits.
    pub fn add(&mut self, token: Token, pos: i32, seq: i32, logits: bool) -> Result<()> {
        check(unsafe { sys::mor_batch_add(self.ptr.as_ptr(), token, pos, seq, logits as i32) }).map(|_| ())
    }

    pub fn clear(&mut self) {
        unsafe { sys::mor_batch_clear(self.ptr.as_ptr()) }
    }

    pub fn len(&self) -> usize {
        unsafe { sys::mor_batch_size(self.ptr.as_ptr()) as usize }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The sampler's settings; `Default` is libmor's (mor_sampler_params_init).
pub type SamplerParams = sys::mor_sampler_params;

/// libmor's default sampler settings.
pub fn sampler_params() -> SamplerParams {
    let mut p: SamplerParams = unsafe { std::mem::zeroed() };
    unsafe { sys::mor_sampler_params_init(&mut p, std::mem::size_of::<SamplerParams>()) };
    p
}

/// Picks the next token from logits (seeded; deterministic). `Send`.
pub struct Sampler {
    ptr: NonNull<sys::mor_sampler>,
}

unsafe impl Send for Sampler {}

impl Drop for Sampler {
    fn drop(&mut self) {
        unsafe { sys::mor_sampler_free(self.ptr.as_ptr()) }
    }
}

impl Sampler {
    /// A sampler with these settings (start from [`sampler_params`]).
    pub fn new(params: &SamplerParams) -> Result<Sampler> {
        let mut p = *params;
        p.size = std::mem::size_of::<SamplerParams>() as u32;
        let mut out = ptr::null_mut();
        check(unsafe { sys::mor_sampler_create(&p, &mut out) })?;
        Ok(Sampler { ptr: NonNull::new(out).expect("libmor returned MOR_OK and no sampler") })
    }

    /// Argmax, lowest id on ties.
    pub fn greedy() -> Result<Sampler> {
        let mut p = sampler_params();
        p.temperature = 0.0;
        Sampler::new(&p)
    }

    pub fn sample(&mut self, logits: &[f32]) -> Result<Token> {
        let mut t = 0;
        check(unsafe { sys::mor_sampler_sample(self.ptr.as_ptr(), logits.as_ptr(), logits.len() as i32, &mut t) })?;
        Ok(t)
    }

    /// Add a token to the history (for the repetition penalty).
    pub fn accept(&mut self, token: Token) {
        unsafe { sys::mor_sampler_accept(self.ptr.as_ptr(), token) }
    }

    /// Forget the history, re-seed, set mirostat's mu back (the logit bias
    /// and the breakers stay).
    pub fn reset(&mut self) {
        unsafe { sys::mor_sampler_reset(self.ptr.as_ptr()) }
    }

    /// The logit bias (mor_sampler_set_logit_bias): `(token, bias)` pairs
    /// added to the logits before every stage; `f32::NEG_INFINITY` bans the
    /// token; an empty slice clears it.
    pub fn set_logit_bias(&mut self, bias: &[(Token, f32)]) -> Result<()> {
        let ids: Vec<Token> = bias.iter().map(|b| b.0).collect();
        let vals: Vec<f32> = bias.iter().map(|b| b.1).collect();
        check(unsafe { sys::mor_sampler_set_logit_bias(self.ptr.as_ptr(), ids.as_ptr(), vals.as_ptr(), ids.len() as i32) })?;
        Ok(())
    }

    /// DRY's sequence breakers as token sequences (mor_sampler_set_dry_breakers);
    /// an empty slice clears them.
    pub fn set_dry_breakers(&mut self, breakers: &[&[Token]]) -> Result<()> {
        let flat: Vec<Token> = breakers.iter().flat_map(|b| b.iter().copied()).collect();
        let lens: Vec<i32> = breakers.iter().map(|b| b.len() as i32).collect();
        check(unsafe {
            sys::mor_sampler_set_dry_breakers(self.ptr.as_ptr(), flat.as_ptr(), lens.as_ptr(), lens.len() as i32)
        })?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Context, Router, KvCache
// ---------------------------------------------------------------------------

/// How to create a context; `None` keeps libmor's default.
#[derive(Debug, Clone, Default)]
pub struct ContextParams {
    pub n_ctx: Option<u32>,
    pub n_batch: Option<u32>,
    pub n_seq_max: Option<u32>,
    /// `sys::MOR_KV_*`.
    pub kv_mode: Option<i32>,
    pub n_threads: Option<i32>,
    /// Positions must stay below it; 0: the model's training context, < 0:
    /// no limit.
    pub max_pos: Option<i32>,
    /// Keep hidden states for [`Context::hidden`].
    pub capture_hidden: bool,
    /// BF16 weights on bfloat16-rounded activations (`MOR_CTX_FAST_BF16`).
    pub fast_bf16: bool,
}

/// Scratch, outputs, a KV cache and a router on a model. Borrows the model;
/// `Send`, not `Sync`.
pub struct Context<'m> {
    ptr: NonNull<sys::mor_context>,
    model: &'m Model,
    n_batch: u32,
}

// mor.h: a context (with its cache and router) is used by one thread at a
// time; moving it to another thread is fine. The model it borrows is Sync.
unsafe impl<'m> Send for Context<'m> {}

impl<'m> Drop for Context<'m> {
    fn drop(&mut self) {
        unsafe { sys::mor_context_free(self.ptr.as_ptr()) }
    }
}

/// The routing mode of a context's router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteMode {
    /// The model's own.
    Default,
    /// Official expert-choice top-k (not causal).
    TopK,
    /// Causal thresholds on the router's output.
    Threshold,
    /// Every token gets exactly this many recursions.
    Forced(i32),
    /// Token-choice.
    Token,
}

/// One generated token and the number of recursions it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub token: Token,
    pub depth: i32,
}

impl<'m> Context<'m> {
    pub fn new(model: &'m Model, params: &ContextParams) -> Result<Context<'m>> {
        let mut p: sys::mor_context_params = unsafe { std::mem::zeroed() };
        unsafe { sys::mor_context_params_init(&mut p, std::mem::size_of::<sys::mor_context_params>()) };
        if let Some(v) = params.n_ctx { p.n_ctx = v; }
        if let Some(v) = params.n_batch { p.n_batch = v; }
        if let Some(v) = params.n_seq_max { p.n_seq_max = v; }
        if let Some(v) = params.kv_mode { p.kv_mode = v; }
        if let Some(v) = params.n_threads { p.n_threads = v; }
        if let Some(v) = params.max_pos { p.max_pos = v; }
        if params.capture_hidden {
            p.flags |= sys::MOR_CTX_CAPTURE_HIDDEN as u32;
        }
        if params.fast_bf16 {
            p.flags |= sys::MOR_CTX_FAST_BF16 as u32;
        }
        let mut out = ptr::null_mut();
        check(unsafe { sys::mor_context_create(model.ptr.as_ptr(), &p, &mut out) })?;
        let ptr = NonNull::new(out).expect("libmor returned MOR_OK and no context");
        debug_assert_eq!(unsafe { sys::mor_context_model(ptr.as_ptr()) }, model.as_ptr());
        Ok(Context { ptr, model, n_batch: p.n_batch })
    }

    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// The most tokens one decode takes.
    pub fn n_batch(&self) -> u32 {
        self.n_batch
    }

    /// Run the model over a batch, appending to the KV cache.
    pub fn decode(&mut self, batch: &Batch) -> Result<()> {
        check(unsafe { sys::mor_decode(self.ptr.as_ptr(), batch.ptr.as_ptr()) }).map(|_| ())
    }

    /// Row's logits from the last decode (None if the row asked for none).
    pub fn logits(&self, row: i32) -> Option<&[f32]> {
        let p = unsafe { sys::mor_get_logits(self.ptr.as_ptr(), row) };
        if p.is_null() {
            None
        } else {
            Some(unsafe { std::slice::from_raw_parts(p, self.model.n_vocab() as usize) })
        }
    }

    /// Row's hidden state at capture point `boundary` (capture_hidden only).
    pub fn hidden(&self, boundary: i32, row: i32) -> Option<&[f32]> {
        let p = unsafe { sys::mor_get_hidden(self.ptr.as_ptr(), boundary, row) };
        if p.is_null() {
            None
        } else {
            Some(unsafe { std::slice::from_raw_parts(p, self.model.n_embd() as usize) })
        }
    }

    /// Sequence `seq`'s embedding from the last decode: its rows' final
    /// hidden states pooled (`last`: the last row, else the mean), scaled to
    /// unit length when `normalize` (capture_hidden only; mor_embeddings_seq).
    pub fn embeddings(&self, seq: i32, last: bool, normalize: bool) -> Result<Vec<f32>> {
        let n = self.model.n_embd();
        let mut out = vec![0f32; n.max(0) as usize];
        let pool = if last { sys::MOR_POOL_LAST } else { sys::MOR_POOL_MEAN } as i32;
        let flags = if normalize { sys::MOR_EMBD_NORMALIZE } else { 0 } as u32;
        check(unsafe { sys::mor_embeddings_seq(self.ptr.as_ptr(), seq, pool, flags, out.as_mut_ptr(), n) })?;
        Ok(out)
    }

    /// The recursions each row of the last decode ran.
    pub fn depths(&self) -> Vec<i32> {
        router_depths(unsafe { sys::mor_context_router(self.ptr.as_ptr()) })
    }

    /// The router (routing policy and read-back), borrowed mutably.
    pub fn router(&mut self) -> Router<'_> {
        Router {
            ptr: unsafe { sys::mor_context_router(self.ptr.as_ptr()) },
            n_recursion: self.model.n_recursion(),
            _ctx: PhantomData,
        }
    }

    /// The KV cache, borrowed mutably.
    pub fn kv(&mut self) -> KvCache<'_> {
        KvCache { ptr: unsafe { sys::mor_context_kv(self.ptr.as_ptr()) }, _ctx: PhantomData }
    }

    /// Decode `tokens` of `seq` at positions `pos..`, in chunks of n_batch;
    /// only the last token asks for logits. Returns its row.
    pub fn decode_tokens(&mut self, batch: &mut Batch, tokens: &[Token], pos: i32, seq: i32) -> Result<i32> {
        if tokens.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArg, "decode_tokens: no tokens"));
        }
        let mut row = 0;
        for (c, chunk) in tokens.chunks(self.n_batch.max(1) as usize).enumerate() {
            batch.clear();
            let base = c * self.n_batch.max(1) as usize;
            for (j, &t) in chunk.iter().enumerate() {
                batch.add(t, pos + (base + j) as i32, seq, base + j == tokens.len() - 1)?;
            }
            self.decode(batch)?;
            row = chunk.len() as i32 - 1;
        }
        Ok(row)
    }

    /// Decode the prompt after what sequence 0 already holds, then sample and
    /// decode up to `max_tokens` tokens one at a time, yielding each with its
    /// depth. Stops after an EOS token.
    pub fn generate<'c>(&'c mut self, prompt: &[Token], max_tokens: usize, sampler: &'c mut Sampler)
                        -> Result<Generate<'c, 'm>> {
        let cap = self.n_batch.max(1) as i32;
        let mut batch = Batch::new(cap)?;
        for &t in prompt {
            sampler.accept(t);
        }
        let pos = unsafe { sys::mor_kv_seq_pos_max(sys::mor_context_kv(self.ptr.as_ptr()), 0) } + 1;
        let row = self.decode_tokens(&mut batch, prompt, pos, 0)?;
        let eos = self.model.token_eos();
        Ok(Generate { ctx: self, sampler, batch, row, pos: pos + prompt.len() as i32, left: max_tokens, eos,
                      done: false })
    }
}

/// The iterator of [`Context::generate`].
pub struct Generate<'c, 'm> {
    ctx: &'c mut Context<'m>,
    sampler: &'c mut Sampler,
    batch: Batch,
    row: i32,
    pos: i32,
    left: usize,
    eos: Option<Token>,
    done: bool,
}

impl<'c, 'm> Iterator for Generate<'c, 'm> {
    type Item = Result<Step>;

    fn next(&mut self) -> Option<Result<Step>> {
        if self.done || self.left == 0 {
            return None;
        }
        let r = (|| {
            let logits = self.ctx.logits(self.row)
                .ok_or_else(|| Error::new(ErrorKind::Internal, "the last decode gave no logits"))?;
            let t = self.sampler.sample(logits)?;
            self.batch.clear();
            self.batch.add(t, self.pos, 0, true)?;
            self.ctx.decode(&self.batch)?;
            self.pos += 1;
            self.row = 0;
            Ok(Step { token: t, depth: self.ctx.depths().first().copied().unwrap_or(0) })
        })();
        self.left -= 1;
        match &r {
            Ok(s) if Some(s.token) == self.eos => self.done = true,
            Err(_) => self.done = true,
            _ => {}
        }
        Some(r)
    }
}

fn router_depths(r: *const sys::mor_router) -> Vec<i32> {
    let n = unsafe { sys::mor_router_get_depths(r, ptr::null_mut(), 0) };
    if n <= 0 {
        return Vec::new();
    }
    let mut v = vec![0i32; n as usize];
    let got = unsafe { sys::mor_router_get_depths(r, v.as_mut_ptr(), n) };
    v.truncate(got.max(0).min(n) as usize);
    v
}

/// Depth statistics since the last reset.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterStats {
    pub n_tokens: u64,
    pub mean_depth: f64,
    pub n_at_depth: Vec<u64>,
}

/// A context's router, borrowed from it.
pub struct Router<'c> {
    ptr: *mut sys::mor_router,
    n_recursion: i32,
    _ctx: PhantomData<&'c mut ()>,
}

impl<'c> Router<'c> {
    pub fn set_mode(&mut self, mode: RouteMode) -> Result<()> {
        let (m, d) = match mode {
            RouteMode::Default => (sys::MOR_ROUTE_DEFAULT, 0),
            RouteMode::TopK => (sys::MOR_ROUTE_TOPK, 0),
            RouteMode::Threshold => (sys::MOR_ROUTE_THRESHOLD, 0),
            RouteMode::Forced(d) => (sys::MOR_ROUTE_FORCED, d),
            RouteMode::Token => (sys::MOR_ROUTE_TOKEN, 0),
        };
        check(unsafe { sys::mor_router_set_mode(self.ptr, m as i32, d) }).map(|_| ())
    }

    /// The mode as `sys::MOR_ROUTE_*`.
    pub fn mode(&self) -> i32 {
        unsafe { sys::mor_router_get_mode(self.ptr) }
    }

    pub fn set_threshold(&mut self, recursion: i32, threshold: f32) -> Result<()> {
        check(unsafe { sys::mor_router_set_threshold(self.ptr, recursion, threshold) }).map(|_| ())
    }

    pub fn threshold(&self, recursion: i32) -> f32 {
        unsafe { sys::mor_router_get_threshold(self.ptr, recursion) }
    }

    /// Cap every token's depth (0: no cap).
    pub fn set_max_depth(&mut self, max_depth: i32) -> Result<()> {
        check(unsafe { sys::mor_router_set_max_depth(self.ptr, max_depth) }).map(|_| ())
    }

    /// Exits for decode (MOR_EXIT_*; the learned exit of a model with an
    /// exit gate takes the CDF threshold q in [0, 1]); MOR_EXIT_NONE: off.
    pub fn set_exit(&mut self, exit_mode: i32, threshold: f32) -> Result<()> {
        check(unsafe { sys::mor_router_set_exit(self.ptr, exit_mode, threshold) }).map(|_| ())
    }

    pub fn depths(&self) -> Vec<i32> {
        router_depths(self.ptr)
    }

    fn per_recursion(&self, row: i32,
                     f: unsafe extern "C" fn(*const sys::mor_router, i32, *mut f32, i32) -> i32) -> Result<Vec<f32>> {
        let mut v = vec![0f32; self.n_recursion.max(1) as usize];
        let n = check(unsafe { f(self.ptr, row, v.as_mut_ptr(), v.len() as i32) })?;
        v.truncate((n as usize).min(v.len()));
        Ok(v)
    }

    /// Row's router output per recursion (NaN where it was no candidate).
    pub fn scores(&self, row: i32) -> Result<Vec<f32>> {
        self.per_recursion(row, sys::mor_router_get_scores)
    }

    /// Row's raw router logits per recursion.
    pub fn logits(&self, row: i32) -> Result<Vec<f32>> {
        self.per_recursion(row, sys::mor_router_get_logits)
    }

    pub fn stats(&self) -> Result<RouterStats> {
        let mut s: sys::mor_router_stats = unsafe { std::mem::zeroed() };
        s.size = std::mem::size_of::<sys::mor_router_stats>() as u32;
        check(unsafe { sys::mor_router_get_stats(self.ptr, &mut s) })?;
        Ok(RouterStats { n_tokens: s.n_tokens, mean_depth: s.mean_depth, n_at_depth: s.n_at_depth.to_vec() })
    }

    pub fn reset_stats(&mut self) {
        unsafe { sys::mor_router_reset_stats(self.ptr) }
    }
}

/// A context's KV cache, borrowed from it. Ranges are [p0, p1), a negative
/// bound meaning open.
pub struct KvCache<'c> {
    ptr: *mut sys::mor_kv_cache,
    _ctx: PhantomData<&'c mut ()>,
}

impl<'c> KvCache<'c> {
    pub fn clear(&mut self) {
        unsafe { sys::mor_kv_clear(self.ptr) }
    }

    pub fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> Result<()> {
        check(unsafe { sys::mor_kv_seq_rm(self.ptr, seq, p0, p1) }).map(|_| ())
    }

    pub fn seq_cp(&mut self, src: i32, dst: i32, p0: i32, p1: i32) -> Result<()> {
        check(unsafe { sys::mor_kv_seq_cp(self.ptr, src, dst, p0, p1) }).map(|_| ())
    }

    pub fn seq_keep(&mut self, seq: i32) -> Result<()> {
        check(unsafe { sys::mor_kv_seq_keep(self.ptr, seq) }).map(|_| ())
    }

    /// Move positions `[p0, p1)` of `seq` by `delta` (a context shift): the cached keys are re-rotated.
    pub fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, delta: i32) -> Result<()> {
        check(unsafe { sys::mor_kv_seq_add(self.ptr, seq, p0, p1, delta) }).map(|_| ())
    }

    /// The largest cached position of seq, None if it has none.
    pub fn seq_pos_max(&self, seq: i32) -> Option<i32> {
        let p = unsafe { sys::mor_kv_seq_pos_max(self.ptr, seq) };
        if p >= 0 { Some(p) } else { None }
    }

    /// (allocated, used) bytes of recursion r, or `sys::MOR_KV_ALL` /
    /// `sys::MOR_KV_UNIQUE_LAYERS`.
    pub fn bytes(&self, r: i32) -> Result<(u64, u64)> {
        let (mut a, mut u) = (0u64, 0u64);
        check(unsafe { sys::mor_kv_bytes(self.ptr, r, &mut a, &mut u) })?;
        Ok((a, u))
    }

    pub fn n_cells_used(&self, r: i32) -> Result<i64> {
        let n = unsafe { sys::mor_kv_n_cells_used(self.ptr, r) };
        if n < 0 { Err(Error::from_status(n as i32)) } else { Ok(n) }
    }

    /// `sys::MOR_KV_RECURSION_WISE`, `sys::MOR_KV_SHARED` or `sys::MOR_KV_DENSE`.
    pub fn mode(&self) -> i32 {
        unsafe { sys::mor_kv_mode(self.ptr) }
    }
}

/// Route the library's log to `f` (None silences it). The closure lives for
/// the rest of the program.
pub fn set_log(f: Option<Box<dyn Fn(i32, &str) + Send + Sync + 'static>>, max_level: i32) {
    unsafe extern "C" fn tramp(level: i32, msg: *const c_char, user: *mut c_void) {
        let f = &*(user as *const Box<dyn Fn(i32, &str) + Send + Sync>);
        let m = CStr::from_ptr(msg).to_string_lossy();
        // a panic must not unwind into C
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(level, &m)));
    }
    match f {
        None => unsafe { sys::mor_log_set(None, ptr::null_mut(), 0) },
        Some(f) => {
            // leaked on purpose: a message being delivered on another thread
            // may still reach the previous callback (mor.h)
            let user = Box::into_raw(Box::new(f)) as *mut c_void;
            unsafe { sys::mor_log_set(Some(tramp), user, max_level) }
        }
    }
}
