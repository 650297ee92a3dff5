//! `serve --config FILE` and `serve --print-config`: every flag of `serve`
//! (and the master's TLS and operator-token flags) may be set in a TOML
//! file, under the flag's own name (`http-listen = "127.0.0.1:7180"`).
//! A flag on the command line, or its `LEASEHOLD_*` variable, overrides
//! the file; a key the file should not hold is refused with its name.
//!
//! The file is read before the command line is parsed for good: each key
//! not given otherwise becomes its flag, appended to the arguments, so
//! clap checks, parses and reports every value as it does a flag's.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory};

use crate::Cli;

/// Flags of the top level that configure a master too.
const MASTER_GLOBALS: [&str; 3] = ["tls-cert", "tls-key", "operator-token-file"];
/// Flags that say how to read the settings, not what they are.
const NOT_SETTINGS: [&str; 4] = ["help", "config", "print-config", "version"];

/// What the config file added to the arguments.
#[derive(Debug, Default)]
pub(crate) struct FromFile {
    /// The file, if `--config` named one.
    pub(crate) file: Option<PathBuf>,
    /// The keys it set: those the command line and the environment left
    /// unset.
    pub(crate) keys: BTreeSet<String>,
}

/// `argv` with the settings of `serve --config FILE` that nothing else
/// sets added as flags. Arguments that do not parse are returned as they
/// are, for clap to report.
pub(crate) fn with_config(argv: Vec<OsString>) -> Result<(Vec<OsString>, FromFile), String> {
    // Not yet checked: a flag may need another that only the file gives
    // (`--node` on the command line, `cell` in the file).
    let Ok(matches) = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(&argv)
    else {
        return Ok((argv, FromFile::default()));
    };
    let Some(("serve", serve)) = matches.subcommand() else {
        return Ok((argv, FromFile::default()));
    };
    let Some(file) = serve
        .try_get_one::<PathBuf>("config")
        .ok()
        .flatten()
        .cloned()
    else {
        return Ok((argv, FromFile::default()));
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read the config file {}: {e}", file.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| format!("the config file {} is not TOML: {e}", file.display()))?;
    let settings = settings();
    let mut argv = argv;
    let mut keys = BTreeSet::new();
    for (key, value) in table {
        let Some(id) = settings
            .iter()
            .find(|s| s.flag == key)
            .map(|s| s.id.clone())
        else {
            let dashed = key.replace('_', "-");
            let hint = match settings.iter().any(|s| s.flag == dashed) {
                true => format!("; did you mean {dashed}?"),
                false => String::new(),
            };
            return Err(format!(
                "the config file {} has an unknown key {:?}{hint}: its keys are serve's \
                 flags without their dashes, e.g. data-dir = \"/var/lib/leasehold\" \
                 (`leasehold serve --help` lists them)",
                file.display(),
                crate::printable(&excerpt(&key))
            ));
        };
        let given = source(&matches, serve, &id);
        if matches!(
            given,
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let flag = format!("--{key}");
        match value {
            toml::Value::Boolean(true) => argv.push(flag.into()),
            toml::Value::Boolean(false) => {}
            toml::Value::String(s) => argv.push(format!("{flag}={s}").into()),
            toml::Value::Integer(n) => argv.push(format!("{flag}={n}").into()),
            toml::Value::Float(x) => argv.push(format!("{flag}={x}").into()),
            // A flag given more than once (http-host = ["a", "b"]).
            toml::Value::Array(items) if items.iter().all(toml::Value::is_str) => {
                for item in items.iter().filter_map(toml::Value::as_str) {
                    argv.push(format!("{flag}={item}").into());
                }
            }
            other => {
                return Err(format!(
                    "the config file {} sets {key} to {}: give a string, a number or \
                     true/false, as the flag takes",
                    file.display(),
                    other.type_str()
                ))
            }
        }
        keys.insert(key);
    }
    Ok((
        argv,
        FromFile {
            file: Some(file),
            keys,
        },
    ))
}

/// At most the first 64 characters of `key`: a refusal never repeats a
/// long input whole.
fn excerpt(key: &str) -> String {
    match key.char_indices().nth(64) {
        Some((at, _)) => format!("{}...", &key[..at]),
        None => key.to_string(),
    }
}

/// A setting: its flag's name, and its id in clap's matches.
struct Setting {
    flag: String,
    id: String,
    global: bool,
}

/// Every setting a config file may hold: serve's flags, and the master's
/// flags of the top level.
fn settings() -> Vec<Setting> {
    let command = Cli::command();
    let serve = command
        .find_subcommand("serve")
        .expect("a serve subcommand");
    let own = serve.get_arguments().filter_map(|a| {
        let flag = a.get_long()?.to_string();
        (!NOT_SETTINGS.contains(&flag.as_str())).then(|| Setting {
            flag,
            id: a.get_id().to_string(),
            global: false,
        })
    });
    let globals = command.get_arguments().filter_map(|a| {
        let flag = a.get_long()?;
        MASTER_GLOBALS.contains(&flag).then(|| Setting {
            flag: flag.to_string(),
            id: a.get_id().to_string(),
            global: true,
        })
    });
    own.chain(globals).collect()
}

/// Where the value of `id` came from.
fn source(top: &ArgMatches, serve: &ArgMatches, id: &str) -> Option<ValueSource> {
    serve
        .try_get_raw(id)
        .ok()
        .and_then(|_| serve.value_source(id))
        .or_else(|| top.try_get_raw(id).ok().and_then(|_| top.value_source(id)))
}

/// Prints the settings in force as a config file would hold them, each
/// with where it comes from (`serve --print-config`).
pub(crate) fn print(argv: &[OsString], from_file: &FromFile) {
    let Ok(matches) = Cli::command().try_get_matches_from(argv) else {
        return;
    };
    let Some(("serve", serve)) = matches.subcommand() else {
        return;
    };
    println!("# The settings `leasehold serve` runs with, and where each comes from.");
    if let Some(file) = &from_file.file {
        println!("# Config file: {}", file.display());
    }
    for setting in settings() {
        let at = if setting.global { &matches } else { serve };
        let values: Vec<String> = at
            .try_get_raw(&setting.id)
            .ok()
            .flatten()
            .map(|v| v.map(|v| v.to_string_lossy().to_string()).collect())
            .unwrap_or_default();
        let from = if from_file.keys.contains(&setting.flag) {
            "config file".to_string()
        } else {
            match at.value_source(&setting.id) {
                Some(ValueSource::CommandLine) => "command line".into(),
                Some(ValueSource::EnvVariable) => env_name(&setting.id)
                    .map_or_else(|| "environment".into(), |name| name.to_string()),
                Some(ValueSource::DefaultValue) => "default".into(),
                _ => "not set".into(),
            }
        };
        let flag = &setting.flag;
        // A default is shown commented out, so that the output read back
        // as a config file sets what was set and nothing more.
        let commented = if from == "default" { "# " } else { "" };
        match values.as_slice() {
            [] => println!("# {flag} = (not set)"),
            [value] if is_switch(&setting.id) => {
                println!("{commented}{flag} = {value}  # {from}")
            }
            [value] => println!("{commented}{flag} = {}  # {from}", quoted(value)),
            many => println!(
                "{commented}{flag} = [{}]  # {from}",
                many.iter()
                    .map(|v| quoted(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// Whether the setting `id` is a switch (true or false).
fn is_switch(id: &str) -> bool {
    let command = Cli::command();
    let serve = command.find_subcommand("serve").expect("serve");
    let switch = serve
        .get_arguments()
        .chain(command.get_arguments())
        .find(|a| a.get_id() == id)
        .is_some_and(|a| matches!(a.get_action(), clap::ArgAction::SetTrue));
    switch
}

/// The variable that sets `id`, if any.
fn env_name(id: &str) -> Option<String> {
    let command = Cli::command();
    let serve = command.find_subcommand("serve").expect("serve");
    let name = serve
        .get_arguments()
        .chain(command.get_arguments())
        .find(|a| a.get_id() == id)
        .and_then(|a| a.get_env())
        .map(|e| e.to_string_lossy().to_string());
    name
}

/// `value` as a TOML basic string.
fn quoted(value: &str) -> String {
    let mut quoted = String::from('"');
    for c in value.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}
