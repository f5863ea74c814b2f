// Link libmor: the static library (default) or the shared one, from
// MOR_LIB_DIR (default: the repository's lib/, where `make lib` puts it).
//   MOR_LINK=static|dylib   which one (with dylib, libmor.so.0.MINOR must be on
//                           the loader's path at run time, e.g. LD_LIBRARY_PATH)
//   MOR_LINK_EXTRA=a,b      more libraries to link (e.g. asan,ubsan for a
//                           sanitized libmor.a)
use std::env;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let dir = match env::var("MOR_LIB_DIR") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => manifest.join("../../../lib"),
    };
    let kind = env::var("MOR_LINK").unwrap_or_else(|_| "static".to_string());
    for v in ["MOR_LIB_DIR", "MOR_LINK", "MOR_LINK_EXTRA"] {
        println!("cargo:rerun-if-env-changed={}", v);
    }
    let file = if kind == "dylib" { "libmor.so" } else { "libmor.a" };
    let lib = dir.join(file);
    if !lib.exists() {
        panic!("{} not found: run `make lib` first, or set MOR_LIB_DIR", lib.display());
    }
    println!("cargo:rerun-if-changed={}", lib.display());
    println!("cargo:rustc-link-search=native={}", dir.display());
    match kind.as_str() {
        "static" => {
            println!("cargo:rustc-link-lib=static=mor");
            println!("cargo:rustc-link-lib=m");
            println!("cargo:rustc-link-lib=pthread");
        }
        "dylib" => {
            println!("cargo:rustc-link-lib=dylib=mor");
        }
        other => panic!("MOR_LINK={}: want static or dylib", other),
    }
    if let Ok(extra) = env::var("MOR_LINK_EXTRA") {
        for l in extra.split(',').filter(|s| !s.is_empty()) {
            println!("cargo:rustc-link-lib=dylib={}", l);
        }
    }
    println!("cargo:lib_dir={}", dir.display());
}
