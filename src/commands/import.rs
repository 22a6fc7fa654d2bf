//! `memcal import`: a model's graph from its configuration.

use clap::Subcommand;
use memcal::cli_io::print;
use memcal::graph::Graph;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    source: Source,
}

#[derive(Subcommand)]
pub enum Source {
    /// A Hugging Face `config.json`, or a model's folder holding one (model_type gpt2,
    /// llama, mistral, mixtral, qwen2, qwen3, gemma, bert, roberta, xlm-roberta, camembert,
    /// opt, distilbert, electra, deepseek_v2, t5, bart, vit, gemma2, phi3, starcoder2, olmo,
    /// olmo2, granite, cohere, stablelm, gpt_neox, gptj, phi, falcon, qwen2_moe): the graph
    /// transformers' model class builds from it, at its real parameter count. Another
    /// model_type is refused with the exporter's command for it.
    /// Prints the graph (or writes --out) and, on stderr, what it assumed.
    Hf {
        /// The model's config.json, as it is on the hub.
        config: PathBuf,
        /// Sequence length in tokens (default: the model's positions, capped at 4096 for
        /// decoders and 512 for encoders; the choice is printed).
        #[arg(long)]
        seq: Option<u64>,
        /// Decoder sequence length of an encoder-decoder (t5, bart; default: as --seq).
        #[arg(long)]
        decoder_seq: Option<u64>,
        /// The graph's name (default: the config's folder or file name).
        #[arg(long)]
        name: Option<String>,
        /// The graph's family (default: hf-<model_type>).
        #[arg(long)]
        family: Option<String>,
        /// Write the graph here instead of standard output (refused over an existing file
        /// unless --force).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Overwrite --out if it exists.
        #[arg(long)]
        force: bool,
        /// Write the sequence length as the axis "T" instead of a number: the graph is then
        /// planned at any length with `memcal plan --seq N` (the learned positions of gpt2,
        /// bert and roberta still cap it).
        #[arg(long)]
        seq_axis: bool,
        /// The attention implementation transformers runs (its `attn_implementation`) for
        /// gpt2, bert, roberta and vit: sdpa (transformers' default; no [B, heads, T, T]
        /// tensor) or eager (the probabilities materialised and saved). Llama-family
        /// attention is always drawn as sdpa; t5 is always eager (its relative bias).
        #[arg(long, value_parser = ["sdpa", "eager"], default_value = "sdpa")]
        attn: String,
    },
}

/// `memcal import hf`: the graph, checked, to --out or standard output; what it assumed to
/// standard error.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args { source } = args;
    let Source::Hf {
        config,
        seq,
        decoder_seq,
        name,
        family,
        out,
        force,
        seq_axis,
        attn,
    } = source;
    // A model's folder names the graph, as its config.json does.
    let named = memcal::import::config_file(&config);
    let default_name = {
        let stem = named
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("model");
        let parent = named
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|s| s.to_str());
        match (stem, parent) {
            ("config", Some(p)) => p.to_string(),
            (s, _) => s.to_string(),
        }
    };
    let options = memcal::import::Options {
        seq,
        decoder_seq,
        name: name.unwrap_or(default_name),
        family,
        seq_axis,
        attn: if attn == "eager" {
            memcal::import::Attn::Eager
        } else {
            memcal::import::Attn::Sdpa
        },
    };
    if seq == Some(0) || decoder_seq == Some(0) {
        return Err(
            memcal::Error::Invalid("--seq and --decoder-seq must be at least 1".into()).into(),
        );
    }
    let imported = memcal::import::hf(&config, &options)?;
    let path = out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.json", options.name)));
    let bytes = memcal::zoo::to_bytes(&imported.graph);
    let graph = Graph::check_owned_at(imported.graph, &path, Some(imported.seq))?;
    let mut note = format!(
        "imported {} ({}): {} parameters, sequence length {} ({}){}\n",
        config.display(),
        imported.class,
        memcal::format::count(graph.parameters()),
        imported.seq,
        imported.seq_source,
        if seq_axis {
            "; written as the axis \"T\": plan it with --seq N"
        } else {
            ""
        }
    );
    for d in &imported.drawn {
        note.push_str(&format!("  drawn: {d}\n"));
    }
    for a in &imported.approximations {
        note.push_str(&format!("  approximation: {a}\n"));
    }
    match out {
        Some(out) => {
            if out.exists() && !force {
                return Err(memcal::Error::Invalid(format!(
                    "{}: exists; memcal does not write over a file it may not have written (give --force to replace it, or another --out)",
                    out.display()
                ))
                .into());
            }
            memcal::outputs::write_file_atomic(&out, &bytes)?;
            note.push_str(&format!(
                "wrote {}; plan it with `memcal plan {} --batch N`\n",
                out.display(),
                out.display()
            ));
            eprint!("{note}");
        }
        None => {
            eprint!("{note}");
            print(std::str::from_utf8(&bytes).unwrap_or_default())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
