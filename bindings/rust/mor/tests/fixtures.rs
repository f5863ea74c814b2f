//! The safe wrapper against the official-code fixtures: every fp32 fixture
//! converted by `make fixtures` ($MOR_FIXTURES, default the repository's
//! build/fixtures) reproduces reference.json's greedy tokens
//! (generation.greedy_cached); plus errors, threads and the type contract.
use std::collections::BTreeMap;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn fixture_models() -> PathBuf {
    match std::env::var("MOR_FIXTURES") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => root().join("build/fixtures"),
    }
}

// --- a small JSON reader: reference.json is all we read ---------------------
#[derive(Debug, Clone)]
#[allow(dead_code)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    fn get(&self, k: &str) -> &Json {
        match self {
            Json::Obj(m) => m.get(k).unwrap_or_else(|| panic!("no key {}", k)),
            _ => panic!("not an object at {}", k),
        }
    }
    fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            _ => panic!("not a string"),
        }
    }
    fn ints(&self) -> Vec<i32> {
        match self {
            Json::Arr(a) => a.iter().map(|v| match v { Json::Num(n) => *n as i32, _ => panic!("not a number") }).collect(),
            _ => panic!("not an array"),
        }
    }
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> P<'a> {
    fn ws(&mut self) {
        while self.i < self.s.len() && (self.s[self.i] as char).is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) {
        self.ws();
        assert_eq!(self.s[self.i], c, "JSON: expected {} at {}", c as char, self.i);
        self.i += 1;
    }
    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut m = BTreeMap::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return Json::Obj(m);
                }
                loop {
                    self.ws();
                    let k = match self.value() { Json::Str(s) => s, _ => panic!("JSON: key") };
                    self.eat(b':');
                    let v = self.value();
                    m.insert(k, v);
                    self.ws();
                    let c = self.s[self.i];
                    self.i += 1;
                    if c == b'}' {
                        return Json::Obj(m);
                    }
                    assert_eq!(c, b',');
                }
            }
            b'[' => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return Json::Arr(a);
                }
                loop {
                    a.push(self.value());
                    self.ws();
                    let c = self.s[self.i];
                    self.i += 1;
                    if c == b']' {
                        return Json::Arr(a);
                    }
                    assert_eq!(c, b',');
                }
            }
            b'"' => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let c = self.s[self.i];
                    self.i += 1;
                    match c {
                        b'"' => return Json::Str(out),
                        b'\\' => {
                            let e = self.s[self.i];
                            self.i += 1;
                            match e {
                                b'n' => out.push('\n'),
                                b't' => out.push('\t'),
                                b'u' => {
                                    let h = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                                    out.push(char::from_u32(u32::from_str_radix(h, 16).unwrap()).unwrap_or('?'));
                                    self.i += 4;
                                }
                                other => out.push(other as char),
                            }
                        }
                        _ => {
                            // copy a UTF-8 sequence whole
                            let start = self.i - 1;
                            while self.i < self.s.len() && (self.s[self.i] & 0xC0) == 0x80 {
                                self.i += 1;
                            }
                            out.push_str(std::str::from_utf8(&self.s[start..self.i]).unwrap());
                        }
                    }
                }
            }
            b't' => { self.i += 4; Json::Bool(true) }
            b'f' => { self.i += 5; Json::Bool(false) }
            b'n' => { self.i += 4; Json::Null }
            b'N' => { self.i += 3; Json::Num(f64::NAN) }
            b'I' => { self.i += 8; Json::Num(f64::INFINITY) }
            _ => {
                let start = self.i;
                if self.s[self.i] == b'-' && self.s.get(self.i + 1) == Some(&b'I') {
                    self.i += 9;
                    return Json::Num(f64::NEG_INFINITY);
                }
                while self.i < self.s.len() && b"+-.eE0123456789".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                Json::Num(std::str::from_utf8(&self.s[start..self.i]).unwrap().parse().unwrap())
            }
        }
    }
}

fn read_json(p: &PathBuf) -> Json {
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {}", p.display(), e));
    P { s: &b, i: 0 }.value()
}

struct Fixture {
    name: String,
    gguf: PathBuf,
    input_ids: Vec<i32>,
    greedy: Vec<i32>,
    expert: bool,
}

fn fp32_fixtures() -> Vec<Fixture> {
    let dir = root().join("tests/data/fixtures");
    let mut names: Vec<String> = std::fs::read_dir(&dir).unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("reference.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let r = read_json(&dir.join(&n).join("reference.json"));
        if r.get("spec").get("precision").str() != "fp32" {
            continue; // bf16 has an exact argmax tie (tests/test_fixtures.py)
        }
        out.push(Fixture {
            gguf: fixture_models().join(format!("{}.st.gguf", n)),
            input_ids: r.get("input_ids").ints(),
            greedy: r.get("generation").get("greedy_cached").get("tokens").ints(),
            expert: r.get("forward").get("routing").get("type").str() == "expert",
            name: n,
        });
    }
    out
}

fn greedy(model: &mor::Model, f: &Fixture, threads: i32) -> Vec<(i32, i32)> {
    let mut ctx = mor::Context::new(model, &mor::ContextParams { n_threads: Some(threads), ..Default::default() })
        .unwrap();
    if f.expert {
        ctx.router().set_mode(mor::RouteMode::TopK).unwrap();
    }
    let mut s = mor::Sampler::greedy().unwrap();
    let steps: Vec<mor::Step> = ctx.generate(&f.input_ids, f.greedy.len(), &mut s).unwrap()
        .collect::<mor::Result<_>>().unwrap();
    assert_eq!(ctx.kv().seq_pos_max(0), Some((f.input_ids.len() + f.greedy.len()) as i32 - 1));
    steps.iter().map(|s| (s.token, s.depth)).collect()
}

#[test]
fn greedy_tokens_of_every_fp32_fixture() {
    let fx = fp32_fixtures();
    assert!(fx.len() >= 5, "found {} fp32 fixtures", fx.len());
    for f in &fx {
        assert!(f.gguf.is_file(), "{}: run `make fixtures`", f.gguf.display());
        let model = mor::Model::load_file(&f.gguf, &mor::ModelParams::default()).unwrap();
        let got = greedy(&model, f, 1);
        let toks: Vec<i32> = got.iter().map(|g| g.0).collect();
        assert_eq!(toks, f.greedy, "{}: greedy_cached", f.name);
        let nr = model.n_recursion();
        assert!(got.iter().all(|g| g.1 >= 0 && g.1 <= nr), "{}: depths {:?}", f.name, got);
        // the same from memory
        let bytes = std::fs::read(&f.gguf).unwrap();
        let m2 = mor::Model::load_bytes(bytes, &mor::ModelParams { no_mmap: true, ..Default::default() }).unwrap();
        assert_eq!(greedy(&m2, f, 2), got, "{}: from memory, 2 threads", f.name);
        println!("{}: {:?}", f.name, toks);
    }
}

#[test]
fn one_model_shared_by_threads() {
    let fx = fp32_fixtures();
    let f = fx.iter().find(|f| f.name == "expert_mc3_fix_perturbed").expect("fixture");
    let model = mor::Model::load_file(&f.gguf, &Default::default()).unwrap();
    let results: Vec<Vec<(i32, i32)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..3).map(|_| sc.spawn(|| greedy(&model, f, 1))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results {
        assert_eq!(r.iter().map(|g| g.0).collect::<Vec<_>>(), f.greedy);
    }
    // a context moves to another thread (Send)
    let ctx = mor::Context::new(&model, &Default::default()).unwrap();
    std::thread::scope(|sc| {
        sc.spawn(move || {
            let mut ctx = ctx;
            assert_eq!(ctx.kv().seq_pos_max(0), None);
        });
    });
}

#[test]
fn type_contract() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<mor::Model>();
    send::<mor::Context<'static>>();
    send::<mor::Batch>();
    send::<mor::Sampler>();
    send_sync::<mor::Error>();
}

#[test]
fn sampler_stages_bias_and_breakers() {
    let logits: Vec<f32> = (0..64).map(|i| ((i * 37) % 64) as f32 / 8.0).collect();
    let best = (0..64).max_by(|&a, &b| logits[a].partial_cmp(&logits[b]).unwrap()).unwrap() as mor::Token;
    let mut g = mor::Sampler::greedy().unwrap();
    assert_eq!(g.sample(&logits).unwrap(), best);
    g.set_logit_bias(&[(best, f32::NEG_INFINITY), (5, 100.0)]).unwrap();
    assert_eq!(g.sample(&logits).unwrap(), 5);
    assert!(g.set_logit_bias(&[(-1, 1.0)]).is_err());
    g.set_logit_bias(&[]).unwrap();
    assert_eq!(g.sample(&logits).unwrap(), best);
    let mut p = mor::sampler_params();
    p.seed = 9;
    p.mirostat = 2;
    p.dry_multiplier = 0.8;
    p.n_samplers = 2;
    p.samplers[0] = mor::sys::MOR_STAGE_TOP_K as i32;
    p.samplers[1] = mor::sys::MOR_STAGE_TEMPERATURE as i32;
    let draw = |p: &mor::SamplerParams| {
        let mut s = mor::Sampler::new(p).unwrap();
        s.set_dry_breakers(&[&[3], &[4, 5]]).unwrap();
        (0..32).map(|_| s.sample(&logits).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(draw(&p), draw(&p));
    p.mirostat = 7;
    assert!(mor::Sampler::new(&p).is_err());
    let mut s = mor::Sampler::greedy().unwrap();
    assert!(s.set_dry_breakers(&[&[]]).is_err());
}

#[test]
fn json_schema_to_grammar() {
    let g = mor::json_schema_to_grammar(r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#)
        .unwrap();
    assert!(g.starts_with("root ::= "), "{}", g);
    assert!(g.contains(r#"root-n-kv ::= "\"n\"" space ":" space integer"#), "{}", g);
    let many: String = (0..400).map(|i| format!(r#""p{}":{{}}"#, i)).collect::<Vec<_>>().join(",");
    let big = mor::json_schema_to_grammar(&format!(r#"{{"properties":{{{}}}}}"#, many)).unwrap();
    assert!(big.len() > 4096 && big.contains("root-p399-kv"));
    let e = mor::json_schema_to_grammar(r#"{"type":"array","minItems":2,"maxItems":1}"#).err().unwrap();
    assert_eq!(e.kind, mor::ErrorKind::InvalidArg);
    assert!(e.message.contains("minItems 2 > maxItems 1"), "{}", e.message);
}

#[test]
fn errors_carry_status_and_message() {
    let e = mor::Model::load_file("/nonexistent/model.gguf", &Default::default()).err().unwrap();
    assert_eq!(e.kind, mor::ErrorKind::Io);
    assert!(e.message.contains("/nonexistent/model.gguf"), "{}", e.message);
    assert_eq!(e.name(), "MOR_E_IO");
    let e = mor::Model::load_bytes(vec![b'G', b'G', b'U', b'F', 3, 0, 0, 0], &Default::default()).err().unwrap();
    assert_eq!(e.kind, mor::ErrorKind::Format, "{}", e);
    assert_eq!(mor::ErrorKind::from_status(-999), mor::ErrorKind::Unknown(-999));
    assert_eq!(mor::ErrorKind::Unknown(-999).status(), -999);
    for s in -12..=-1 {
        assert_eq!(mor::ErrorKind::from_status(s).status(), s);
        assert!(!matches!(mor::ErrorKind::from_status(s), mor::ErrorKind::Unknown(_)), "{}", s);
    }

    let tc = fixture_models().join("token_mc3_perturbed.st.gguf");
    let model = mor::Model::load_file(&tc, &Default::default()).unwrap();
    let mut ctx = mor::Context::new(&model, &Default::default()).unwrap();
    let e = ctx.router().set_mode(mor::RouteMode::TopK).err().unwrap();
    assert_eq!(e.kind, mor::ErrorKind::Unsupported);
    assert!(!e.message.is_empty());
    assert_eq!(model.tokenize("x", false, false).err().unwrap().kind, mor::ErrorKind::Unsupported);
    let mut b = mor::Batch::new(1).unwrap();
    b.add(model.n_vocab() + 3, 0, 0, true).unwrap();
    assert_eq!(ctx.decode(&b).err().unwrap().kind, mor::ErrorKind::OutOfRange);
    assert_eq!(b.add(1, 1, 0, true).err().unwrap().kind, mor::ErrorKind::BufferTooSmall);
    assert_eq!(model.meta("no.such.key").unwrap(), None);
    assert_eq!(model.meta("general.architecture").unwrap().as_deref(), Some("mor"));
    mor::check_abi().unwrap();
    assert_eq!(mor::version(), format!("{}.{}.{}", mor::sys::MOR_VERSION_MAJOR, mor::sys::MOR_VERSION_MINOR,
                                       mor::sys::MOR_VERSION_PATCH));
}

#[test]
fn forward_depths_match_the_reference() {
    let dir = root().join("tests/data/fixtures/expert_mc3_fix_perturbed");
    let r = read_json(&dir.join("reference.json"));
    let ids = r.get("input_ids").ints();
    let want = r.get("forward").get("routing").get("depth").ints();
    let model = mor::Model::load_file(fixture_models().join("expert_mc3_fix_perturbed.st.gguf"), &Default::default())
        .unwrap();
    let mut ctx = mor::Context::new(&model, &Default::default()).unwrap();
    ctx.router().set_mode(mor::RouteMode::TopK).unwrap();
    let mut b = mor::Batch::new(ids.len() as i32).unwrap();
    for (i, &t) in ids.iter().enumerate() {
        b.add(t, i as i32, 0, true).unwrap();
    }
    ctx.decode(&b).unwrap();
    assert_eq!(ctx.depths(), want);
    assert_eq!(ctx.logits(0).unwrap().len(), model.n_vocab() as usize);
    let st = ctx.router().stats().unwrap();
    assert_eq!(st.n_tokens, ids.len() as u64);
    assert_eq!(ctx.router().scores(0).unwrap().len(), model.n_recursion() as usize);
    let (alloc, used) = ctx.kv().bytes(mor::sys::MOR_KV_ALL).unwrap();
    assert!(used > 0 && alloc >= used);
    ctx.kv().clear();
    assert_eq!(ctx.kv().seq_pos_max(0), None);
}

#[test]
fn embeddings_pool_the_final_hidden_states() {
    let model = mor::Model::load_file(fixture_models().join("expert_mc3_fix_perturbed.st.gguf"), &Default::default())
        .unwrap();
    let params = mor::ContextParams { capture_hidden: true, ..Default::default() };
    let mut ctx = mor::Context::new(&model, &params).unwrap();
    let mut b = mor::Batch::new(6).unwrap();
    for i in 0..6 {
        b.add(3 + 7 * i, i, 0, false).unwrap();
    }
    ctx.decode(&b).unwrap();
    let last = model.n_boundaries() - 1;
    let d = model.n_embd() as usize;
    let mean = ctx.embeddings(0, false, false).unwrap();
    for j in 0..d {
        let want: f64 = (0..6).map(|i| ctx.hidden(last, i).unwrap()[j] as f64).sum::<f64>() / 6.0;
        assert!((mean[j] as f64 - want).abs() < 1e-6);
    }
    assert_eq!(ctx.embeddings(0, true, false).unwrap(), ctx.hidden(last, 5).unwrap().to_vec());
    let unit: f64 = ctx.embeddings(0, false, true).unwrap().iter().map(|&x| (x as f64) * (x as f64)).sum();
    assert!((unit - 1.0).abs() < 1e-5);
    assert!(ctx.embeddings(1, false, true).is_err());   // no row of sequence 1
    let plain = mor::Context::new(&model, &Default::default()).unwrap();
    assert!(plain.embeddings(0, false, true).is_err());   // no capture_hidden
}
