/* yaml.h - the YAML subset of a resolved Hydra/OmegaConf config, parsed into
 * the json DOM of json.h.
 *
 * Supported: block mappings nested by indentation, block sequences ("- x",
 * also at the same indentation as their key, as PyYAML writes them), plain
 * scalars (also continued on more-indented lines), 'single' and "double"
 * quoted scalars, flow collections on one line ([a, b], {k: v}), comments,
 * a leading "---". Plain scalars resolve as PyYAML/OmegaConf do: null/~,
 * true/false (and yes/no/on/off), integers and floats become JSON_NULL,
 * JSON_BOOL and JSON_NUMBER; everything else is a JSON_STRING.
 * Not supported (a clear error): anchors, aliases, tags, block scalars (| >),
 * multi-document streams, multi-line flow collections, tabs in indentation. */
#ifndef CV_YAML_H
#define CV_YAML_H
#include <stddef.h>
#include "json.h"

#define YAML_MAX_DEPTH 64

/* Parse text[0..len). NULL on error with "YAML: ... at line N" in err. An
 * empty document gives a JSON_NULL value. Free with json_free. */
json *yaml_parse(const char *text, size_t len, char *err, size_t errcap);

#endif
