//! # softtimer-async-macros: `#[main]` and `#[test]` for softtimer-async
//!
//! The two attributes that turn an `async fn` into a plain one that builds a
//! `softtimer_async::Runtime` and runs the body on it, as `#[tokio::main]` and
//! `#[tokio::test]` do for tokio. Use them through `softtimer-async` (its `macros` feature,
//! on by default): `#[softtimer_async::main]`, `#[softtimer_async::test]`.
//!
//! Each keeps the function as written, made synchronous: the body becomes an inner `async fn`
//! with the same signature (so `?` converts errors into the declared return type, as it did),
//! and the outer function builds the runtime and returns what `block_on` returns. Options
//! are checked when the program compiles: an unknown one, a zero thread count or a
//! precision the runtime does not have is a compile error at the option, not a panic.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{AttrStyle, Attribute, Expr, ExprLit, ItemFn, Lit, LitInt, LitStr, Meta, Token};

/// Runs an `async fn` on a softtimer-async runtime: the function builds a
/// `softtimer_async::Runtime` and `block_on`s its body.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// #[softtimer_async::main]
/// async fn main() -> std::io::Result<()> {
///     let start = Instant::now();
///     softtimer_async::time::sleep(Duration::from_micros(150)).await;
///     assert!(start.elapsed() >= Duration::from_micros(150));
///     let socket = softtimer_async::UdpSocket::bind("127.0.0.1:0").await?;
///     socket.send_to(b"ping", socket.local_addr()?).await?;
///     Ok(())
/// }
/// ```
///
/// Options, each at most once, in any order:
///
/// | option | what it sets | default |
/// | --- | --- | --- |
/// | `threads = N` | `Builder::threads(N)`: loops on N threads, the first on this one; at least 1 | 1 |
/// | `precision = "…"` | `Builder::precision`: `"coarse"`, `"calibrated"`, `"busy"`, `"window-20us"`, `"within-5us"` (units `ns`, `us`, `µs`, `ms`), as `Precision::name` writes them | `calibrated` |
/// | `crate = "path"` | where `softtimer_async` is, for a crate that re-exports it | `::softtimer_async` |
///
/// `threads = N` is not tokio's multi-thread flavor: each thread runs a loop of its own, a
/// task stays on the loop that spawned it (`spawn` from `main` runs on `main`'s loop), and
/// work reaches the others through `Handle::spawn_on` or a `bind_reuse_port` listener per
/// loop; with more than one, the loops are pinned to CPUs (a thread `main` starts inherits
/// loop 0's; build the runtime by hand with `Builder::pin(false)` to keep the CPUs free).
/// tokio's `flavor = "current_thread"` is accepted (it is the default);
/// `flavor = "multi_thread"`, `worker_threads` and `start_paused` are refused with what to
/// use instead.
///
/// ```
/// #[softtimer_async::main(threads = 2, precision = "window-20us")]
/// async fn main() {
///     assert_eq!(softtimer_async::Handle::current().threads(), 2);
/// }
/// ```
///
/// # Panics
///
/// The function panics, with the error, when the runtime cannot be built (its `epoll`,
/// `eventfd` or a worker thread cannot be made); build the runtime by hand with
/// `Runtime::builder()` to handle that error instead.
#[proc_macro_attribute]
pub fn main(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    let item: TokenStream = item.into();
    expand(Kind::Main, args.into(), item.clone())
        .unwrap_or_else(|e| with_stand_in(e, item))
        .into()
}

/// A `#[test]` whose body is async, run on a fresh softtimer-async runtime. (The examples
/// are `no_run`: a doctest compiles without `--test`, which drops a `#[test]` function once
/// the attribute has expanded; softtimer-async's `tests/macros.rs` runs them.)
///
/// ```no_run
/// use std::time::Duration;
/// use softtimer_async::time::{self, timeout};
///
/// #[softtimer_async::test]
/// async fn no_reply_within_a_millisecond() {
///     let slow = time::sleep(Duration::from_secs(5));
///     assert!(timeout(Duration::from_millis(1), slow).await.is_err());
/// }
/// ```
///
/// It takes the options of [`macro@main`], and `simulated`: the runtime runs on a simulated
/// clock (`Builder::simulated`), whose time jumps to the next due timer whenever no task can
/// run, no descriptor is ready and no blocking work is under way, as tokio's
/// `start_paused = true`. A test of an hour's
/// timeouts then takes no time, and its timers fire exactly at their deadlines. Read the time
/// with `softtimer_async::time::now()`: `std::time::Instant::now()` is the machine's.
///
/// ```no_run
/// use std::time::Duration;
/// use softtimer_async::time::{self, sleep};
///
/// #[softtimer_async::test(simulated)]
/// async fn an_hour_on_a_simulated_clock() {
///     let start = time::now();
///     let wall = std::time::Instant::now();
///     sleep(Duration::from_secs(3600)).await;
///     assert_eq!(time::now() - start, Duration::from_secs(3600));
///     assert!(wall.elapsed() < Duration::from_secs(60));
/// }
/// ```
///
/// `simulated` takes one thread (loops sharing the clock would each jump it). A test of
/// several threads does not pin them (`Builder::pin(false)`): tests run side by side.
///
/// Other attributes (`#[should_panic]`, `#[ignore]`, docs) stay on the test. A second test
/// attribute (`#[test]`, `#[tokio::test]`) is a compile error: this one adds `#[test]`.
/// Both attributes take free functions: the body becomes an inner function, where `Self`
/// is not in scope.
#[proc_macro_attribute]
pub fn test(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    expand(Kind::Test, args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Which attribute is expanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Main,
    Test,
}

impl Kind {
    fn attribute(self) -> &'static str {
        match self {
            Kind::Main => "#[softtimer_async::main]",
            Kind::Test => "#[softtimer_async::test]",
        }
    }
}

/// A precision named in an option, checked at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PrecisionName {
    Coarse,
    Calibrated,
    Busy,
    Window { nanos: u64 },
    Within { nanos: u64 },
}

impl PrecisionName {
    /// Reads `coarse`, `calibrated`, `busy`, `window-<d>` or `within-<d>`, where `<d>` is a
    /// whole number and a unit (`ns`, `us`, `µs`, `ms`).
    fn parse(name: &str) -> Result<Self, String> {
        let duration = |d: &str| -> Result<u64, String> {
            let digits = d.find(|c: char| !c.is_ascii_digit()).unwrap_or(d.len());
            let (number, unit) = d.split_at(digits);
            let per_unit = match unit {
                "ns" => 1,
                "us" | "µs" => 1_000,
                "ms" => 1_000_000,
                "" => return Err(format!("`{d}` needs a unit: ns, us, µs or ms")),
                _ => return Err(format!("unknown unit `{unit}`: ns, us, µs or ms")),
            };
            number
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(per_unit))
                .ok_or_else(|| format!("`{d}` is not a whole number of {unit} a u64 of ns holds"))
        };
        match name {
            "coarse" => Ok(PrecisionName::Coarse),
            "calibrated" => Ok(PrecisionName::Calibrated),
            "busy" => Ok(PrecisionName::Busy),
            _ => {
                if let Some(d) = name.strip_prefix("window-") {
                    Ok(PrecisionName::Window {
                        nanos: duration(d)?,
                    })
                } else if let Some(d) = name.strip_prefix("within-") {
                    Ok(PrecisionName::Within {
                        nanos: duration(d)?,
                    })
                } else {
                    Err(format!(
                        "unknown precision `{name}`: coarse, calibrated, busy, window-<d> or \
                         within-<d> (e.g. window-20us)"
                    ))
                }
            }
        }
    }

    fn to_tokens(self, krate: &syn::Path) -> TokenStream {
        let duration = |nanos: u64| quote!(::core::time::Duration::from_nanos(#nanos));
        match self {
            PrecisionName::Coarse => quote!(#krate::Precision::Coarse),
            PrecisionName::Calibrated => quote!(#krate::Precision::Calibrated),
            PrecisionName::Busy => quote!(#krate::Precision::Busy),
            PrecisionName::Window { nanos } => {
                let d = duration(nanos);
                quote!(#krate::Precision::Window(#d))
            }
            PrecisionName::Within { nanos } => {
                let d = duration(nanos);
                quote!(#krate::Precision::Within(#d))
            }
        }
    }
}

/// What tokio's pool options are told: how threads work here instead.
const ONE_LOOP_PER_THREAD: &str = "`threads = N` runs N independent loops, the first on \
     this thread, and a task stays on the loop that spawned it (spread work with \
     `Handle::spawn_on`, or one `bind_reuse_port` listener per loop)";

/// The attribute's options.
#[derive(Default)]
struct Options {
    threads: Option<usize>,
    /// `flavor = "current_thread"` was given (tokio's spelling of one loop).
    current_thread: bool,
    precision: Option<PrecisionName>,
    simulated: bool,
    krate: Option<syn::Path>,
}

fn string_value<'a>(value: &'a Expr, option: &str) -> syn::Result<&'a LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{option}` takes a string literal"),
        )),
    }
}

fn integer_value<'a>(value: &'a Expr, option: &str) -> syn::Result<&'a LitInt> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(n), ..
        }) => Ok(n),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{option}` takes an integer literal"),
        )),
    }
}

impl Options {
    fn parse(kind: Kind, args: TokenStream) -> syn::Result<Options> {
        let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
        let mut options = Options::default();
        let mut seen: Vec<String> = Vec::new();
        for meta in &metas {
            let name = meta
                .path()
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            if seen.contains(&name) {
                return Err(syn::Error::new_spanned(
                    meta.path(),
                    format!("`{name}` is given twice"),
                ));
            }
            match (name.as_str(), meta) {
                ("threads", Meta::NameValue(nv)) => {
                    let n: usize = integer_value(&nv.value, "threads")?.base10_parse()?;
                    if n == 0 {
                        return Err(syn::Error::new_spanned(
                            &nv.value,
                            "a runtime needs at least one thread",
                        ));
                    }
                    options.threads = Some(n);
                }
                ("precision", Meta::NameValue(nv)) => {
                    let s = string_value(&nv.value, "precision")?;
                    let p = PrecisionName::parse(&s.value())
                        .map_err(|e| syn::Error::new_spanned(s, e))?;
                    options.precision = Some(p);
                }
                ("crate", Meta::NameValue(nv)) => {
                    options.krate = Some(string_value(&nv.value, "crate")?.parse()?);
                }
                ("flavor", Meta::NameValue(nv)) => {
                    let flavor = string_value(&nv.value, "flavor")?;
                    if flavor.value() != "current_thread" {
                        return Err(syn::Error::new_spanned(
                            flavor,
                            format!(
                                "softtimer-async has no work-stealing pool: `flavor = \"current_thread\"` \
                                 (the default) is the one flavor; {ONE_LOOP_PER_THREAD}"
                            ),
                        ));
                    }
                    // One loop on this thread: the default, unless `threads` says otherwise.
                    options.current_thread = true;
                }
                ("worker_threads", Meta::NameValue(nv)) => {
                    return Err(syn::Error::new_spanned(
                        nv,
                        format!("`worker_threads` is tokio's: {ONE_LOOP_PER_THREAD}"),
                    ));
                }
                ("start_paused", Meta::NameValue(nv)) => {
                    return Err(syn::Error::new_spanned(
                        nv,
                        "`start_paused` is tokio's: `#[softtimer_async::test(simulated)]` runs a \
                         test on a simulated clock that jumps to the next timer",
                    ));
                }
                ("simulated", Meta::Path(_)) if kind == Kind::Test => options.simulated = true,
                ("simulated", Meta::Path(p)) => {
                    return Err(syn::Error::new_spanned(
                        p,
                        "`simulated` is for tests: a program's time is the machine's",
                    ));
                }
                _ => {
                    let simulated = if kind == Kind::Test {
                        ", `simulated`"
                    } else {
                        ""
                    };
                    return Err(syn::Error::new_spanned(
                        meta,
                        format!(
                            "unknown option of {}: it takes `threads = N`, \
                             `precision = \"…\"`{simulated}, `crate = \"path\"` and tokio's \
                             `flavor = \"current_thread\"`",
                            kind.attribute()
                        ),
                    ));
                }
            }
            seen.push(name);
        }
        if options.current_thread && options.threads.is_some_and(|n| n > 1) {
            return Err(syn::Error::new(
                proc_macro2::Span::call_site(),
                "`flavor = \"current_thread\"` is one loop: it cannot take `threads` above 1",
            ));
        }
        if options.simulated && options.threads.is_some_and(|n| n > 1) {
            return Err(syn::Error::new(
                proc_macro2::Span::call_site(),
                "`simulated` takes one thread: loops sharing a simulated clock would each jump \
                 it to their own next timer",
            ));
        }
        Ok(options)
    }

    /// The expression that builds the runtime of `kind`.
    fn builder(&self, kind: Kind, krate: &syn::Path) -> TokenStream {
        let mut builder = quote!(#krate::Runtime::builder());
        if let Some(n) = self.threads {
            builder.extend(quote!(.threads(#n)));
            if kind == Kind::Test && n > 1 {
                // Tests run side by side: pinning each one's loops to the first CPUs would
                // stack them there.
                builder.extend(quote!(.pin(false)));
            }
        }
        if let Some(p) = self.precision {
            let p = p.to_tokens(krate);
            builder.extend(quote!(.precision(#p)));
        }
        if self.simulated {
            // A 1 GHz clock: one tick a nanosecond, as `Instant`s count.
            builder.extend(quote!(.simulated(#krate::SimClock::new(1_000_000_000))));
        }
        builder
    }
}

/// The compile error `error`, and in place of the `main` it was about a synchronous one of
/// the same visibility and return type that never returns: without it, a `main` that failed
/// to expand adds "`main` function not found" to the error that says why. The body is not
/// parsed (it may be what failed to parse), and the `cfg` and `doc` attributes stay, so
/// that a `main` for one configuration among several stays one.
fn with_stand_in(error: syn::Error, item: TokenStream) -> TokenStream {
    let mut out = error.into_compile_error();
    if let Ok(LooseFn {
        attrs,
        vis,
        mut sig,
    }) = syn::parse2::<LooseFn>(item)
    {
        sig.asyncness = None;
        sig.inputs.clear();
        sig.variadic = None;
        sig.generics = syn::Generics::default();
        let kept = attrs.iter().filter(|a| {
            ["cfg", "cfg_attr", "doc"]
                .iter()
                .any(|k| a.path().is_ident(k))
        });
        out.extend(quote! {
            #(#kept)*
            #[allow(dead_code, unreachable_code)]
            #vis #sig { ::core::unreachable!() }
        });
    }
    out
}

/// A function's attributes, visibility and signature, its body left unparsed.
struct LooseFn {
    attrs: Vec<Attribute>,
    vis: syn::Visibility,
    sig: syn::Signature,
}

impl syn::parse::Parse for LooseFn {
    fn parse(input: syn::parse::ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let _body: proc_macro2::Group = input.parse()?;
        Ok(LooseFn { attrs, vis, sig })
    }
}

/// Whether `attr` is a test attribute already (`#[test]`, `#[tokio::test]`, ...).
fn is_test_attribute(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "test")
}

fn expand(kind: Kind, args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let options = Options::parse(kind, args)?;
    let function: ItemFn = syn::parse2(item)?;
    let sig = &function.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            format!(
                "{} needs an `async fn`: the `async` keyword is missing",
                kind.attribute()
            ),
        ));
    }
    if !sig.inputs.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.inputs,
            format!("{} takes a function without arguments", kind.attribute()),
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            format!("{} takes a function without generics", kind.attribute()),
        ));
    }
    if kind == Kind::Test
        && let Some(attr) = function.attrs.iter().find(|a| is_test_attribute(a))
    {
        return Err(syn::Error::new_spanned(
            attr,
            "a second test attribute: #[softtimer_async::test] adds #[test] itself",
        ));
    }
    let (inner, outer): (Vec<&Attribute>, Vec<&Attribute>) = function
        .attrs
        .iter()
        .partition(|a| matches!(a.style, AttrStyle::Inner(_)));
    let krate = options
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::softtimer_async));
    let builder = options.builder(kind, &krate);
    let vis = &function.vis;
    let name = &sig.ident;
    let mut outer_sig = sig.clone();
    outer_sig.asyncness = None;
    let stmts = &function.block.stmts;
    let test = (kind == Kind::Test).then(|| quote!(#[::core::prelude::v1::test]));
    let message = format!("building the runtime of {}", kind.attribute());
    // The body runs as an inner `async fn` of the same signature, so that its return type
    // (and `?`'s conversions into it) is inferred exactly as the user wrote it.
    Ok(quote! {
        #(#outer)*
        #test
        #vis #outer_sig {
            #sig {
                #(#inner)*
                #(#stmts)*
            }
            #builder.build().expect(#message).block_on(#name())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{Kind, PrecisionName, TokenStream, expand, quote, with_stand_in};
    use quote::ToTokens;

    fn tokens(t: impl ToTokens) -> String {
        t.to_token_stream().to_string()
    }

    fn error(kind: Kind, args: &str, item: &str) -> String {
        let args: TokenStream = args.parse().unwrap();
        let item: TokenStream = item.parse().unwrap();
        expand(kind, args, item).unwrap_err().to_string()
    }

    fn expanded(kind: Kind, args: &str, item: &str) -> String {
        let args: TokenStream = args.parse().unwrap();
        let item: TokenStream = item.parse().unwrap();
        tokens(expand(kind, args, item).unwrap())
    }

    #[test]
    fn precision_names_as_the_runtime_writes_them() {
        assert_eq!(PrecisionName::parse("coarse"), Ok(PrecisionName::Coarse));
        assert_eq!(
            PrecisionName::parse("calibrated"),
            Ok(PrecisionName::Calibrated)
        );
        assert_eq!(PrecisionName::parse("busy"), Ok(PrecisionName::Busy));
        assert_eq!(
            PrecisionName::parse("window-20us"),
            Ok(PrecisionName::Window { nanos: 20_000 })
        );
        assert_eq!(
            PrecisionName::parse("window-20µs"),
            Ok(PrecisionName::Window { nanos: 20_000 })
        );
        assert_eq!(
            PrecisionName::parse("within-5us"),
            Ok(PrecisionName::Within { nanos: 5_000 })
        );
        assert_eq!(
            PrecisionName::parse("window-1500ns"),
            Ok(PrecisionName::Window { nanos: 1_500 })
        );
        assert_eq!(
            PrecisionName::parse("within-2ms"),
            Ok(PrecisionName::Within { nanos: 2_000_000 })
        );
    }

    #[test]
    fn a_precision_the_runtime_lacks_is_refused() {
        for (name, says) in [
            ("fine", "unknown precision `fine`"),
            ("window-20", "needs a unit"),
            ("window-20s", "unknown unit `s`"),
            ("window-", "needs a unit"),
            ("window-us", "is not a whole number"),
            ("within--5us", "unknown unit `-5us`"),
            ("window-99999999999999999ms", "is not a whole number"),
            ("Calibrated", "unknown precision"),
        ] {
            let e = PrecisionName::parse(name).unwrap_err();
            assert!(e.contains(says), "{name}: {e}");
        }
    }

    #[test]
    fn main_builds_the_runtime_and_blocks_on_the_body() {
        let out = expanded(
            Kind::Main,
            "",
            "async fn main() -> std::io::Result<()> { let x = f().await?; Ok(()) }",
        );
        let want = tokens(quote! {
            fn main() -> std::io::Result<()> {
                async fn main() -> std::io::Result<()> { let x = f().await?; Ok(()) }
                ::softtimer_async::Runtime::builder()
                    .build()
                    .expect("building the runtime of #[softtimer_async::main]")
                    .block_on(main())
            }
        });
        assert_eq!(out, want);
    }

    #[test]
    fn options_become_builder_calls() {
        let out = expanded(
            Kind::Test,
            r#"precision = "window-20us", simulated, crate = "my::rt""#,
            "#[doc = \" Docs.\"] #[should_panic] async fn t() { #![allow(unused)] boom() }",
        );
        let want = tokens(quote! {
            #[doc = " Docs."]
            #[should_panic]
            #[::core::prelude::v1::test]
            fn t() {
                async fn t() { #![allow(unused)] boom() }
                my::rt::Runtime::builder()
                    .precision(my::rt::Precision::Window(::core::time::Duration::from_nanos(20000u64)))
                    .simulated(my::rt::SimClock::new(1_000_000_000))
                    .build()
                    .expect("building the runtime of #[softtimer_async::test]")
                    .block_on(t())
            }
        });
        assert_eq!(out, want);
    }

    #[test]
    fn bad_options_are_compile_errors() {
        let f = "async fn main() {}";
        for (kind, args, says) in [
            (Kind::Main, "threads = 0", "at least one thread"),
            (
                Kind::Main,
                "threads = \"2\"",
                "`threads` takes an integer literal",
            ),
            (
                Kind::Main,
                "threads = 1, threads = 2",
                "`threads` is given twice",
            ),
            (
                Kind::Main,
                "precision = 20",
                "`precision` takes a string literal",
            ),
            (
                Kind::Main,
                "precision = \"fast\"",
                "unknown precision `fast`",
            ),
            (Kind::Main, "simulated", "`simulated` is for tests"),
            (
                Kind::Main,
                "flavour = \"current_thread\"",
                "unknown option of #[softtimer_async::main]",
            ),
            (Kind::Test, "paused = true", "`simulated`, `crate"),
            (Kind::Main, "threads", "unknown option"),
            (Kind::Main, "crate = \"not a path\"", "unexpected token"),
            (
                Kind::Test,
                "simulated, threads = 2",
                "`simulated` takes one thread",
            ),
        ] {
            let e = error(kind, args, f);
            assert!(e.contains(says), "{args}: {e}");
        }
    }

    #[test]
    fn functions_it_cannot_run_are_compile_errors() {
        for (kind, item, says) in [
            (Kind::Main, "fn main() {}", "the `async` keyword is missing"),
            (Kind::Main, "async fn main(n: u32) {}", "without arguments"),
            (Kind::Test, "async fn t<T>() {}", "without generics"),
            (
                Kind::Test,
                "#[test] async fn t() {}",
                "a second test attribute",
            ),
            (
                Kind::Test,
                "#[tokio::test] async fn t() {}",
                "a second test attribute",
            ),
        ] {
            let e = error(kind, "", item);
            assert!(e.contains(says), "{item}: {e}");
        }
    }

    #[test]
    fn tokios_pool_options_say_what_to_use_instead() {
        let f = "async fn main() {}";
        // The one flavor there is: accepted, and the same runtime as without it.
        assert_eq!(
            expanded(Kind::Main, "flavor = \"current_thread\"", f),
            expanded(Kind::Main, "", f)
        );
        for (args, says) in [
            ("flavor = \"multi_thread\"", "no work-stealing pool"),
            (
                "worker_threads = 4",
                "`threads = N` runs N independent loops",
            ),
            (
                "start_paused = true",
                "`#[softtimer_async::test(simulated)]`",
            ),
            (
                "flavor = \"current_thread\", threads = 2",
                "cannot take `threads` above 1",
            ),
        ] {
            let e = error(Kind::Main, args, f);
            assert!(e.contains(says), "{args}: {e}");
            assert!(
                e.contains("Handle::spawn_on")
                    || !(args.contains("worker") || args.contains("multi")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_function_that_fails_to_expand_leaves_a_synchronous_stand_in() {
        let item: TokenStream = "pub async fn main(n: u32) -> std::io::Result<()> { Ok(()) }"
            .parse()
            .unwrap();
        let e = syn::Error::new(proc_macro2::Span::call_site(), "why");
        let out = tokens(with_stand_in(e, item));
        assert!(out.contains("compile_error"), "{out}");
        // Not async, no arguments, the same name, visibility and return type.
        assert!(
            out.contains(
                "pub fn main () -> std :: io :: Result < () > { :: core :: unreachable ! () }"
            ),
            "{out}"
        );
        // A body that does not parse still gets its stand-in; `cfg` and `doc` stay.
        let item: TokenStream = "#[cfg(unix)] /// Docs.\n #[inline] async fn main() { let = ; }"
            .parse()
            .unwrap();
        let e = syn::Error::new(proc_macro2::Span::call_site(), "why");
        let out = tokens(with_stand_in(e, item));
        assert!(
            out.contains("# [cfg (unix)]") && out.contains("# [doc"),
            "{out}"
        );
        assert!(
            !out.contains("inline") && out.contains("fn main () {"),
            "{out}"
        );
        // An item that is not a function: the error alone.
        let e = syn::Error::new(proc_macro2::Span::call_site(), "why");
        let out = tokens(with_stand_in(e, "struct S;".parse().unwrap()));
        assert!(!out.contains("unreachable"), "{out}");
    }
}
