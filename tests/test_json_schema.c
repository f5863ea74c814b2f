/* test_json_schema.c - mor_json_schema_to_grammar: each supported schema
 * feature gives a well-formed grammar with the rules it should have (every
 * rule named is defined once, reachable from root, names of [a-zA-Z0-9-]);
 * the library's GBNF parser (grammar.h) takes it; invalid JSON and refused
 * schemas give MOR_E_INVALID_ARG with a message
 * naming the place; the buffer contract of mor.h (BUFFER_TOO_SMALL gives
 * the size, a failed call writes nothing); the same schema gives the same
 * bytes; and, through the library's GBNF parser and matcher (grammar.h),
 * that each grammar accepts the instances the schema accepts and rejects
 * the others (a table of schema, instance, verdict). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mor.h"
#include "grammar.h"   /* grammar_parse, grammar_match: the acceptance table */
#include "check.h"

/* The grammar of a schema as a NUL-terminated malloc'd string, or NULL
 * (with *st the status). */
static char *convert(const char *schema, mor_status *st)
{
    size_t n = 0;
    mor_status s = mor_json_schema_to_grammar(schema, strlen(schema), NULL, 0, &n);
    if (s != MOR_E_BUFFER_TOO_SMALL) { *st = s; return NULL; }
    char *g = malloc(n + 1);
    if (!g) { *st = MOR_E_NOMEM; return NULL; }
    size_t n2 = 0;
    s = mor_json_schema_to_grammar(schema, strlen(schema), g, n, &n2);
    *st = s;
    if (s != MOR_OK || n2 != n) { free(g); return NULL; }
    g[n] = 0;
    return g;
}

/* ---- a structural check of the grammar text ---------------------------- */
enum { MAXR = 512 };
typedef struct { char name[96]; const char *body; size_t blen; int reach; } grule;

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static int find_rule(const grule *r, int n, const char *s, size_t len)
{
    for (int i = 0; i < n; i++) if (strlen(r[i].name) == len && !memcmp(r[i].name, s, len)) return i;
    return -1;
}

/* The names a body refers to, skipping literals, classes and {m,n}; calls
 * fn for each. Returns 0 when the body is malformed (an unterminated
 * literal or class). */
static int body_refs(const char *b, size_t n, const grule *r, int nr, int *undefined, int *targets, int *nt)
{
    for (size_t i = 0; i < n;) {
        char c = b[i];
        if (c == '"' || c == '[') {
            char end = c == '"' ? '"' : ']';
            for (i++; i < n && b[i] != end; i++) if (b[i] == '\\') i++;
            if (i >= n) return 0;
            i++;
        } else if (c == '{') {
            while (i < n && b[i] != '}') i++;
            if (i >= n) return 0;
            i++;
        } else if (name_char(c)) {
            size_t j = i;
            while (j < n && name_char(b[j])) j++;
            int k = find_rule(r, nr, b + i, j - i);
            if (k < 0) (*undefined)++;
            else targets[(*nt)++] = k;
            i = j;
        } else i++;
    }
    return 1;
}

/* root first, names unique and well formed, every name used is defined,
 * every rule reachable from root. */
static int well_formed(const char *g, char *why, size_t whylen)
{
    grule r[MAXR];
    int nr = 0;
    const char *p = g;
    while (*p) {
        const char *eol = strchr(p, '\n');
        if (!eol) { snprintf(why, whylen, "no newline at the end"); return 0; }
        const char *sep = strstr(p, " ::= ");
        if (!sep || sep > eol || nr == MAXR) { snprintf(why, whylen, "a line without ' ::= '"); return 0; }
        size_t nl = (size_t)(sep - p);
        if (!nl || nl >= sizeof r[0].name) { snprintf(why, whylen, "empty or long name"); return 0; }
        for (size_t i = 0; i < nl; i++) if (!name_char(p[i])) { snprintf(why, whylen, "bad name char"); return 0; }
        memcpy(r[nr].name, p, nl);
        r[nr].name[nl] = 0;
        if (find_rule(r, nr, p, nl) >= 0) { snprintf(why, whylen, "rule %.60s twice", r[nr].name); return 0; }
        r[nr].body = sep + 5;
        r[nr].blen = (size_t)(eol - (sep + 5));
        r[nr].reach = 0;
        nr++;
        p = eol + 1;
    }
    if (!nr || strcmp(r[0].name, "root")) { snprintf(why, whylen, "the first rule is not root"); return 0; }
    int stack[MAXR], ns = 0;
    stack[ns++] = 0;
    r[0].reach = 1;
    int *targets = malloc(sizeof *targets * 65536);
    if (!targets) return 0;
    while (ns) {
        int k = stack[--ns], nt = 0, undef = 0;
        if (!body_refs(r[k].body, r[k].blen, r, nr, &undef, targets, &nt) || undef) {
            snprintf(why, whylen, "rule %.60s: %s", r[k].name, undef ? "an undefined name" : "malformed body");
            free(targets);
            return 0;
        }
        for (int i = 0; i < nt; i++) if (!r[targets[i]].reach) { r[targets[i]].reach = 1; stack[ns++] = targets[i]; }
    }
    free(targets);
    for (int i = 0; i < nr; i++) if (!r[i].reach) { snprintf(why, whylen, "rule %.60s unreachable", r[i].name); return 0; }
    return 1;
}

/* The body of rule `name` (static copy), or "" */
static const char *rule_body(const char *g, const char *name)
{
    static char out[4096];
    char pat[128];
    snprintf(pat, sizeof pat, "%s ::= ", name);
    out[0] = 0;
    for (const char *p = g; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, pat, strlen(pat))) {
            const char *b = p + strlen(pat), *e = strchr(b, '\n');
            size_t n = (size_t)(e - b) < sizeof out - 1 ? (size_t)(e - b) : sizeof out - 1;
            memcpy(out, b, n);
            out[n] = 0;
            break;
        }
    }
    return out;
}

/* A schema that converts: the grammar is well formed and root's body, or
 * the whole grammar, contains each of the given fragments. */
static void accepts(const char *what, const char *schema, const char *root_has, const char *grammar_has)
{
    mor_status st;
    char *g = convert(schema, &st);
    char why[160] = "";
    int wf = g && well_formed(g, why, sizeof why);
    CHECK(g && wf, "%s: converts to a well-formed grammar (%s%s%s)", what, mor_status_str(st),
          g ? ", " : "", g ? (wf ? "ok" : why) : mor_last_error());
    if (g) {
        grammar_rules *gr = NULL;
        mor_status pst = grammar_parse(g, strlen(g), NULL, "test", &gr);
        CHECK(pst == MOR_OK, "%s: the library's GBNF parser takes it (%s)", what, pst ? mor_last_error() : "ok");
        grammar_rules_free(gr);
    }
    if (g && root_has)
        CHECK(strstr(rule_body(g, "root"), root_has) != NULL, "%s: root ::= ...%s... (got root ::= %s)",
              what, root_has, rule_body(g, "root"));
    if (g && grammar_has)
        CHECK(strstr(g, grammar_has) != NULL, "%s: the grammar has %s", what, grammar_has);
    free(g);
}

static void refuses(const char *what, const char *schema, const char *msg_has)
{
    char buf[64];
    memset(buf, 0x5a, sizeof buf);
    size_t n = 12345;
    mor_status st = mor_json_schema_to_grammar(schema, strlen(schema), buf, sizeof buf, &n);
    int untouched = n == 12345;
    for (size_t i = 0; i < sizeof buf; i++) untouched &= buf[i] == 0x5a;
    CHECK(st == MOR_E_INVALID_ARG && strstr(mor_last_error(), msg_has) && untouched,
          "%s: MOR_E_INVALID_ARG naming %s, nothing written (%s: %s)", what, msg_has, mor_status_str(st),
          mor_last_error());
}

static void features(void)
{
    accepts("{}: any value", "{}", "value", "value ::= object | array | string | number | boolean | null");
    accepts("true: any value", "true", "value", "object ::= ");
    accepts("string", "{\"type\":\"string\"}", "string", "char ::= [^\"\\\\\\x7F\\x00-\\x1F]");
    accepts("number", "{\"type\":\"number\"}", "number", "decimal-part ::= [0-9]{1,16}");
    accepts("integer", "{\"type\":\"integer\"}", "integer", "integral-part ::= [0] | [1-9] [0-9]{0,15}");
    accepts("boolean", "{\"type\":\"boolean\"}", "boolean", "( \"true\" | \"false\" ) space");
    accepts("null", "{\"type\":\"null\"}", "null", "null ::= \"null\" space");
    accepts("bounded whitespace", "{\"type\":\"null\"}", NULL, "space ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?");
    accepts("type array", "{\"type\":[\"string\",\"null\"]}", "root-string | root-null", NULL);
    accepts("type array: number takes integer", "{\"type\":[\"integer\",\"number\"]}", "number", NULL);
    accepts("minLength/maxLength", "{\"type\":\"string\",\"minLength\":2,\"maxLength\":5}", "char{2,5}", NULL);
    accepts("maxLength alone", "{\"type\":\"string\",\"maxLength\":3}", "char{0,3}", NULL);
    accepts("minLength implies a string", "{\"minLength\":1}", "char+", NULL);
    accepts("format date-time is enforced", "{\"type\":\"string\",\"format\":\"date-time\"}", "[Tt]", NULL);
    accepts("integer bounds", "{\"type\":\"integer\",\"minimum\":1,\"maximum\":12}", "[1-9] | \"1\" [0-2]", NULL);
    accepts("pattern", "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "( [\\x61-\\x7A] ) +", NULL);
    accepts("array of strings", "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}",
            "\"[\" space ( string ( \",\" space string )* )? \"]\" space", NULL);
    accepts("array, no items: any values", "{\"type\":\"array\"}", "value", NULL);
    accepts("minItems 2 maxItems 4", "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":4}",
            "integer ( \",\" space integer ){1,3} \"]\"", NULL);
    accepts("minItems 1", "{\"type\":\"array\",\"minItems\":1}", "value ( \",\" space value )* \"]\"", NULL);
    accepts("maxItems 1", "{\"type\":\"array\",\"maxItems\":1}", "( value )?", NULL);
    accepts("maxItems 0", "{\"type\":\"array\",\"maxItems\":0}", "\"[\" space \"]\" space", NULL);
    accepts("items false", "{\"type\":\"array\",\"items\":false}", "\"[\" space \"]\" space", NULL);
    accepts("prefixItems: each element optional, then any", "{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
            "\"[\" space ( string ( \",\" space integer ( \",\" space value )* )? )? \"]\" space", NULL);
    accepts("prefixItems, items false, minItems", "{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
            "\"items\":false,\"minItems\":2}", "\"[\" space string \",\" space integer \"]\" space", NULL);
    accepts("prefixItems, items, counts", "{\"prefixItems\":[{\"type\":\"null\"}],\"items\":{\"type\":\"boolean\"},"
            "\"minItems\":3,\"maxItems\":4}", "null ( \",\" space boolean ){2,3} \"]\"", NULL);
    accepts("items as an array: a tuple", "{\"type\":\"array\",\"items\":[{\"type\":\"object\",\"properties\":{\"a\":{}}}]}",
            "( root-item0 ( \",\" space value )* )?", "root-item0 ::= \"{\" space");
    accepts("items object", "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}}}}",
            "root-item", "root-item ::= \"{\" space ( root-item-a-kv )? \"}\" space");
    accepts("object, required in the order of properties",
            "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\"},\"a\":{\"type\":\"integer\"}},"
            "\"required\":[\"a\",\"b\"]}", "\"{\" space root-b-kv \",\" space root-a-kv \"}\" space",
            "root-a-kv ::= \"\\\"a\\\"\" space \":\" space integer");
    accepts("object, optional after required",
            "{\"type\":\"object\",\"properties\":{\"x\":{},\"r\":{\"type\":\"boolean\"},\"y\":{}},\"required\":[\"r\"]}",
            "root-r-kv ( \",\" space ( root-x-kv root-y-rest | root-y-kv ) )? \"}\"",
            "root-y-rest ::= ( \",\" space root-y-kv )?");
    accepts("object, all optional",
            "{\"properties\":{\"a\":{},\"b\":{},\"c\":{}}}",
            "( root-a-kv root-b-rest | root-b-kv root-c-rest | root-c-kv )?",
            "root-b-rest ::= ( \",\" space root-b-kv )? root-c-rest");
    accepts("object, a required name not in properties: any value", "{\"required\":[\"k\"]}",
            "root-k-kv", "root-k-kv ::= \"\\\"k\\\"\" space \":\" space value");
    accepts("object, no properties: any object", "{\"type\":\"object\"}", "object", NULL);
    accepts("additionalProperties false, no properties", "{\"type\":\"object\",\"additionalProperties\":false}",
            "\"{\" space \"}\" space", NULL);
    accepts("additionalProperties schema: a map",
            "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\"}}",
            "( root-additional-kv ( \",\" space root-additional-kv )* )?",
            "root-additional-kv ::= string \":\" space number");
    accepts("additionalProperties true after properties",
            "{\"properties\":{\"a\":{\"type\":\"null\"}},\"required\":[\"a\"],\"additionalProperties\":true}",
            "root-a-kv ( \",\" space ( root-additional-kv ( \",\" space root-additional-kv )* ) )?",
            "root-additional-kv ::= string \":\" space value");
    accepts("nested objects",
            "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}},"
            "\"required\":[\"q\"]}},\"required\":[\"p\"]}",
            "root-p-kv", "root-p ::= \"{\" space root-p-q-kv \"}\" space");
    accepts("enum of any JSON values", "{\"enum\":[\"a\\\"b\",1.5,null,true,[1,{\"k\":[]}]]}",
            "\"\\\"a\\\\\\\"b\\\"\" space | \"1.5\" space | \"null\" space | \"true\" space | \"[\" space \"1\" space \",\" "
            "space \"{\" space \"\\\"k\\\"\" space \":\" space \"[\" space \"]\" space \"}\" space \"]\" space", NULL);
    accepts("enum filtered by type", "{\"type\":\"string\",\"enum\":[\"x\",1,\"yy\"]}",
            "\"\\\"x\\\"\" space | \"\\\"yy\\\"\" space", NULL);
    accepts("enum filtered by maxLength", "{\"type\":\"string\",\"enum\":[\"x\",\"yy\"],\"maxLength\":1}",
            "\"\\\"x\\\"\" space", NULL);
    accepts("const", "{\"const\":\"on\"}", "\"\\\"on\\\"\" space", NULL);
    accepts("const with control characters and unicode", "{\"const\":\"a\\nb\\u0001\\u00e9\\ud83d\\ude00\"}",
            "\"\\\"a\\\\nb\\\\u0001\xc3\xa9\xf0\x9f\x98\x80\\\"\" space", NULL);
    accepts("anyOf", "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "string | integer", NULL);
    accepts("oneOf", "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}}},{\"type\":\"null\"}],"
            "\"description\":\"annotations beside it\"}", "root-0 | null", "root-0 ::= \"{\" space");
    accepts("allOf of objects merged",
            "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]},"
            "{\"$ref\":\"#/$defs/B\"}],\"$defs\":{\"B\":{\"properties\":{\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}}}",
            "\"{\" space root-a-kv \",\" space root-b-kv \"}\" space", NULL);
    accepts("allOf of one schema", "{\"allOf\":[{\"type\":\"boolean\"}]}", "boolean", NULL);
    accepts("$ref to $defs", "{\"$defs\":{\"Name\":{\"type\":\"string\",\"maxLength\":8}},\"$ref\":\"#/$defs/Name\"}",
            "Name", "Name ::= \"\\\"\" char{0,8} \"\\\"\" space");
    accepts("$ref to definitions",
            "{\"definitions\":{\"P\":{\"type\":\"integer\"}},\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/definitions/P\"},"
            "\"b\":{\"$ref\":\"#/definitions/P\"}},\"required\":[\"a\",\"b\"]}",
            "root-a-kv", "root-b-kv ::= \"\\\"b\\\"\" space \":\" space P");
    accepts("$ref with escaped pointer", "{\"$defs\":{\"a/b~c\":{\"type\":\"null\"}},\"$ref\":\"#/$defs/a~1b~0c\"}",
            "a-b-c", "a-b-c ::= null");
    accepts("recursive $ref: a recursive rule",
            "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},"
            "{\"type\":\"null\"}]}},\"required\":[\"next\"]}},\"$ref\":\"#/$defs/node\"}",
            "node", "node-next ::= node | null");
    accepts("$ref to the root", "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}", "root ( \",\" space root )*", NULL);
    accepts("a $defs name that is a primitive's", "{\"$defs\":{\"string\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/string\"}",
            "string-1", "string-1 ::= integer");
    accepts("unknown annotations are ignored", "{\"type\":\"null\",\"title\":\"t\",\"x-custom\":{\"pattern\":1},"
            "\"examples\":[1],\"default\":null,\"$schema\":\"https://json-schema.org/draft/2020-12/schema\"}", "null", NULL);
    accepts("uniqueItems false is nothing", "{\"type\":\"array\",\"uniqueItems\":false}", "value", NULL);
    accepts("a key with odd characters", "{\"properties\":{\"a b\\\"\\\\\":{}},\"required\":[\"a b\\\"\\\\\"]}",
            "root-a-b---kv", "root-a-b---kv ::= \"\\\"a b\\\\\\\"\\\\\\\\\\\"\" space");
    accepts("counts as 5.0", "{\"type\":\"array\",\"maxItems\":2.0}", "( \",\" space value )? )?", NULL);
}

static void errors(void)
{
    /* invalid JSON: byte, line and column */
    refuses("empty text", "", "invalid JSON at byte 0");
    refuses("trailing comma", "{\"type\":\"string\",}", "invalid JSON at byte 17 (line 1, column 18)");
    refuses("single quotes", "{'type':'string'}", "invalid JSON");
    refuses("leading zero", "{\"maxItems\":01}", "leading zero");
    refuses("NaN", "{\"const\":NaN}", "invalid JSON");
    refuses("text after the value", "{} {}", "text after the value");
    refuses("raw control character", "{\"const\":\"a\tb\"}", "control character");
    refuses("lone surrogate", "{\"const\":\"\\ud800\"}", "surrogate");
    refuses("invalid UTF-8", "{\"const\":\"\xc0\xaf\"}", "UTF-8");
    refuses("bad escape", "{\"const\":\"\\x41\"}", "invalid escape");
    refuses("duplicate key", "{\"type\":\"string\",\"type\":\"null\"}", "duplicate member");
    refuses("line and column", "{\n  \"a\": [1,\n  2,,]}", "line 3, column 5");
    char deep[600];
    size_t k = 0;
    for (int i = 0; i < 200; i++) deep[k++] = '[';
    for (int i = 0; i < 200; i++) deep[k++] = ']';
    deep[k] = 0;
    refuses("JSON nested 200 deep", deep, "nested deeper than 128");
    /* schemas refused, with their JSON pointer */
    refuses("not an object", "3", "schema at \"#\": a schema must be an object or a boolean");
    refuses("false", "false", "no value is valid");
    refuses("false property", "{\"properties\":{\"a\":false}}", "\"#/properties/a\"");
    refuses("minItems > maxItems", "{\"properties\":{\"t\":{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}}}",
            "\"#/properties/t\": minItems 3 > maxItems 2");
    refuses("minLength > maxLength", "{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "minLength 3 > maxLength 2");
    refuses("negative minItems", "{\"type\":\"array\",\"minItems\":-1}", "\"#/minItems\": minItems must be a non-negative integer");
    refuses("fractional maxLength", "{\"maxLength\":1.5}", "\"#/maxLength\"");
    refuses("string maxItems", "{\"maxItems\":\"3\"}", "\"#/maxItems\"");
    refuses("count over the limit", "{\"type\":\"array\",\"maxItems\":100000}", "above 10000");
    refuses("unknown $ref", "{\"$ref\":\"#/$defs/Nope\"}", "\"#/$ref\": $ref \"#/$defs/Nope\" does not resolve");
    refuses("remote $ref", "{\"$ref\":\"https://example.com/s.json\"}", "only local references");
    refuses("$ref not a string", "{\"$ref\":1}", "$ref must be a string");
    refuses("left-recursive $ref cycle", "{\"$defs\":{\"A\":{\"$ref\":\"#/$defs/B\"},\"B\":{\"anyOf\":[{\"$ref\":\"#/$defs/A\"},"
            "{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/A\"}", "refers back to itself");
    refuses("$ref to the root, directly", "{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "\"#/anyOf/0/$ref\"");
    refuses("required recursion: no finite value", "{\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}",
            "no finite value satisfies the schema");
    refuses("minItems recursion: no finite value", "{\"$defs\":{\"T\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/T\"},"
            "\"minItems\":1}},\"$ref\":\"#/$defs/T\"}", "rule T requires itself");
    accepts("optional recursion is fine", "{\"properties\":{\"a\":{\"$ref\":\"#\"}}}", "( root-a-kv )?", NULL);
    refuses("pattern on a number", "{\"properties\":{\"id\":{\"type\":\"number\",\"pattern\":\"^a\"}}}",
            "\"#/properties/id/pattern\": keyword \"pattern\" is not supported except with \"type\": \"string\"");
    refuses("minimum on a number", "{\"type\":\"number\",\"minimum\":0}",
            "\"minimum\" is not supported except with \"type\": \"integer\"");
    refuses("minimum without a type", "{\"minimum\":0}", "\"minimum\" is not supported");
    refuses("bounds with enum", "{\"type\":\"integer\",\"enum\":[1,2],\"maximum\":1}", "beside enum or const");
    refuses("empty bounds", "{\"type\":\"integer\",\"minimum\":3,\"exclusiveMaximum\":3}", "no integer");
    refuses("a lookahead", "{\"type\":\"string\",\"pattern\":\"^a(?=b)\"}", "lookaround");
    refuses("a backreference", "{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences");
    refuses("an inner anchor", "{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchor");
    refuses("an unclosed group", "{\"type\":\"string\",\"pattern\":\"^(ab$\"}", "unclosed group");
    refuses("an unknown format", "{\"type\":\"string\",\"format\":\"uri\"}", "format \"uri\" is not supported");
    refuses("pattern with maxLength", "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "minLength or maxLength");
    refuses("not", "{\"not\":{}}", "\"not\"");
    refuses("uniqueItems true", "{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
    refuses("prefixItems not an array", "{\"prefixItems\":{}}", "\"#/prefixItems\": prefixItems must be an array");
    refuses("prefixItems, items false, minItems too large", "{\"prefixItems\":[{}],\"items\":false,\"minItems\":2}",
            "items is false after 1 prefixItems but minItems is 2");
    refuses("an unsupported keyword in a prefix item", "{\"prefixItems\":[{},{\"maximum\":1}]}",
            "\"#/prefixItems/1/maximum\"");
    refuses("unknown type", "{\"type\":\"float\"}", "\"#/type\": type must be one of");
    refuses("unknown type in an array", "{\"type\":[\"null\",\"str\"]}", "\"#/type/1\"");
    refuses("empty type array", "{\"type\":[]}", "empty array");
    refuses("empty enum", "{\"enum\":[]}", "no value of enum");
    refuses("enum not an array", "{\"enum\":3}", "\"#/enum\": enum must be an array");
    refuses("const against type", "{\"type\":\"string\",\"const\":1}", "no value of const");
    refuses("empty anyOf", "{\"anyOf\":[]}", "\"#/anyOf\": anyOf must be a non-empty array");
    refuses("anyOf beside type", "{\"type\":\"object\",\"anyOf\":[{\"required\":[\"a\"]}]}", "\"anyOf\" beside \"type\"");
    refuses("allOf of non-objects", "{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", "\"#/allOf/0\": allOf");
    refuses("allOf defining a property twice",
            "{\"allOf\":[{\"properties\":{\"a\":{}}},{\"properties\":{\"a\":{}}}]}", "defined twice");
    refuses("required not strings", "{\"required\":[1]}", "\"#/required/0\"");
    refuses("properties not an object", "{\"type\":\"object\",\"properties\":[]}", "properties must be an object");
    char nest[4096];
    k = 0;
    for (int i = 0; i < 63; i++) k += (size_t)snprintf(nest + k, sizeof nest - k, "{\"items\":");
    k += (size_t)snprintf(nest + k, sizeof nest - k, "{\"items\":{}}");
    for (int i = 0; i < 63; i++) nest[k++] = '}';
    nest[k] = 0;
    refuses("schemas nested 65 deep", nest, "nested deeper than 64");
    refuses("an unsupported keyword deep inside names its pointer",
            "{\"$defs\":{\"T\":{\"type\":\"object\",\"properties\":{\"x~/y\":{\"items\":{\"multipleOf\":2}}}}},\"$ref\":\"#/$defs/T\"}",
            "\"#/$defs/T/properties/x~0~1y/items/multipleOf\"");
}

/* Thousands of properties: linear work (a name lookup per rule was once a
 * scan of every rule, minutes for this one). */
static void large(void)
{
    enum { NP = 4000 };
    size_t cap = 64 + (size_t)NP * 48, k = 0;
    char *s = malloc(cap);
    if (!s) { CHECK(0, "malloc"); return; }
    k += (size_t)snprintf(s + k, cap - k, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < NP; i++)
        k += (size_t)snprintf(s + k, cap - k, "%s\"p%d\":{\"properties\":{\"x\":{}}}", i ? "," : "", i);
    snprintf(s + k, cap - k, "}}");
    mor_status st;
    char *g = convert(s, &st);
    CHECK(g && strstr(g, "\nroot-p3999-kv ::= \"\\\"p3999\\\"\" space \":\" space root-p3999\n") &&
          strstr(g, "\nroot-p1-rest ::= ( \",\" space root-p1-kv )? root-p2-rest\n"),
          "%d optional properties: a kv rule and a rest rule each (%s)", NP, mor_status_str(st));
    free(g);
    free(s);
}

static void contract(void)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}";
    size_t n = 0, len = strlen(s);
    CHECK(mor_json_schema_to_grammar(NULL, 0, NULL, 0, &n) == MOR_E_INVALID_ARG && strstr(mor_last_error(), "NULL"),
          "NULL schema: MOR_E_INVALID_ARG");
    CHECK(mor_json_schema_to_grammar(s, len, NULL, 0, NULL) == MOR_E_INVALID_ARG, "NULL len_out: MOR_E_INVALID_ARG");
    CHECK(mor_json_schema_to_grammar(s, len, NULL, 5, &n) == MOR_E_INVALID_ARG, "NULL buf with cap 5: MOR_E_INVALID_ARG");
    n = 0;
    mor_status st = mor_json_schema_to_grammar(s, len, NULL, 0, &n);
    CHECK(st == MOR_E_BUFFER_TOO_SMALL && n > 20 && strstr(mor_last_error(), "bytes"),
          "cap 0: MOR_E_BUFFER_TOO_SMALL, *len_out = %zu, the size needed", n);
    char *buf = malloc(n + 8), *again = malloc(n + 8);
    if (!buf || !again) { CHECK(0, "malloc"); free(buf); free(again); return; }
    memset(buf, 0x5a, n + 8);
    size_t m = 0;
    st = mor_json_schema_to_grammar(s, len, buf, n - 1, &m);
    int untouched = 1;
    for (size_t i = 0; i < n + 8; i++) untouched &= buf[i] == 0x5a;
    CHECK(st == MOR_E_BUFFER_TOO_SMALL && m == n && untouched, "cap one short: BUFFER_TOO_SMALL, the size, buf untouched");
    st = mor_json_schema_to_grammar(s, len, buf, n, &m);
    CHECK(st == MOR_OK && m == n && !strcmp(mor_last_error(), ""), "cap exactly the size: MOR_OK, the message cleared");
    CHECK(buf[n] == 0x5a, "nothing written past the grammar (no NUL)");
    CHECK(!memcmp(buf, "root ::= ", 9) && buf[n - 1] == '\n', "the grammar starts with root and ends with a newline");
    st = mor_json_schema_to_grammar(s, len, again, n + 8, &m);
    CHECK(st == MOR_OK && m == n && !memcmp(buf, again, n), "deterministic: the same bytes twice");
    const char *spaced = " {\n\t\"type\" : \"object\" , \"properties\" : { \"a\" : { \"type\" : \"string\" } } ,\r\n"
                         " \"required\" : [ \"a\" ] }\n";
    memset(again, 0, n + 8);
    st = mor_json_schema_to_grammar(spaced, strlen(spaced), again, n + 8, &m);
    CHECK(st == MOR_OK && m == n && !memcmp(buf, again, n), "the same schema with other whitespace: the same grammar");
    /* the length counts, not a NUL: a schema followed by garbage */
    char withtail[256];
    snprintf(withtail, sizeof withtail, "%s}}garbage", s);
    st = mor_json_schema_to_grammar(withtail, len, again, n + 8, &m);
    CHECK(st == MOR_OK && m == n && !memcmp(buf, again, n), "only len bytes of the schema are read");
    free(buf);
    free(again);
}

/* ---- acceptance: schema, instance, verdict through grammar_match -------- */
/* In the table ' stands for " (JSON needs many of them); no test needs a
 * literal '. */
static void unquote(char *dst, const char *src, size_t cap)
{
    size_t k = 0;
    for (; *src && k + 1 < cap; src++) dst[k++] = *src == '\'' ? '"' : *src;
    dst[k] = 0;
}

#define PERSON "{'type':'object','properties':{'name':{'type':'string'},'age':{'type':'integer'}," \
               "'tags':{'type':'array','items':{'type':'string'},'maxItems':2}},'required':['name']}"
#define LIST   "{'$defs':{'node':{'type':'object','properties':{'value':{'type':'number'}," \
               "'next':{'anyOf':[{'$ref':'#/$defs/node'},{'type':'null'}]}},'required':['value','next']}}," \
               "'$ref':'#/$defs/node'}"
#define OPT3   "{'properties':{'a':{'type':'integer'},'b':{'type':'integer'},'c':{'type':'integer'}}}"
#define ALLOF  "{'allOf':[{'properties':{'a':{'type':'string'}},'required':['a']},{'$ref':'#/definitions/B'}]," \
               "'definitions':{'B':{'type':'object','properties':{'b':{'type':'integer'}},'required':['b']}}}"

static const struct { const char *schema, *instance; int accept; } TABLE[] = {
    /* objects: required in order, optional after, no other members */
    { PERSON, "{'name':'Al'}", 1 },
    { PERSON, "{'name':'Al','age':30}", 1 },
    { PERSON, "{'name':'Al','tags':['a','b']}", 1 },
    { PERSON, "{'name':'Al','age':-3,'tags':[]}", 1 },
    { PERSON, "{ 'name' : 'A\\'l\\u00e9\xc3\xa9' ,\n  'age' : 0 }", 1 },
    { PERSON, "{'name':'Al'}\n", 1 },
    { PERSON, "{'age':30}", 0 },
    { PERSON, "{'age':30,'name':'Al'}", 0 },
    { PERSON, "{'name':'Al','tags':['a','b','c']}", 0 },
    { PERSON, "{'name':'Al','age':1.5}", 0 },
    { PERSON, "{'name':'Al','extra':1}", 0 },
    { PERSON, "{'name':'Al',}", 0 },
    { PERSON, "{'name':'Al','age':01}", 0 },
    { PERSON, "{'name':'a\tb'}", 0 },
    { PERSON, "{'name':'a\\qb'}", 0 },
    { PERSON, "{'name':'Al'}x", 0 },
    { PERSON, "{  'name':'Al'}", 0 },
    { PERSON, "{\n                    'name':'Al'}", 1 },
    { PERSON, "{\n                     'name':'Al'}", 0 },
    { OPT3, "{}", 1 },
    { OPT3, "{'b':1}", 1 },
    { OPT3, "{'a':1,'c':3}", 1 },
    { OPT3, "{'a':1,'b':2,'c':3}", 1 },
    { OPT3, "{'c':3,'a':1}", 0 },
    { OPT3, "{'a':1,'a':1}", 0 },
    { OPT3, "{,'a':1}", 0 },
    { "{'required':['k']}", "{'k':[1,{'x':null}]}", 1 },
    { "{'required':['k']}", "{}", 0 },
    { "{'type':'object','additionalProperties':{'type':'number'}}", "{'a':1,'b':2.5}", 1 },
    { "{'type':'object','additionalProperties':{'type':'number'}}", "{}", 1 },
    { "{'type':'object','additionalProperties':{'type':'number'}}", "{'a':'x'}", 0 },
    { "{'type':'object','additionalProperties':false}", "{}", 1 },
    { "{'type':'object','additionalProperties':false}", "{'a':1}", 0 },
    { "{'properties':{'a':{'type':'null'}},'required':['a'],'additionalProperties':true}", "{'a':null,'zz':[1],'y':{}}", 1 },
    { "{'properties':{'a':{'type':'null'}},'required':['a'],'additionalProperties':true}", "{'zz':1,'a':null}", 0 },
    { "{'type':'object'}", "{'any':{'thing':[true]}}", 1 },
    { "{'type':'object'}", "[]", 0 },
    { ALLOF, "{'a':'x','b':1}", 1 },
    { ALLOF, "{'a':'x'}", 0 },
    { ALLOF, "{'b':1,'a':'x'}", 0 },
    /* arrays */
    { "{'type':'array','items':{'type':'boolean'},'minItems':2,'maxItems':3}", "[true,false]", 1 },
    { "{'type':'array','items':{'type':'boolean'},'minItems':2,'maxItems':3}", "[ true , false , true ]", 1 },
    { "{'type':'array','items':{'type':'boolean'},'minItems':2,'maxItems':3}", "[true]", 0 },
    { "{'type':'array','items':{'type':'boolean'},'minItems':2,'maxItems':3}", "[true,true,true,true]", 0 },
    { "{'type':'array','items':{'type':'boolean'},'minItems':2,'maxItems':3}", "[true,1]", 0 },
    { "{'type':'array'}", "[1,'x',null,[],{}]", 1 },
    { "{'type':'array','items':false}", "[]", 1 },
    { "{'type':'array','items':false}", "[1]", 0 },
    { "{'type':'array','items':{'$ref':'#'}}", "[[],[[]]]", 1 },
    { "{'type':'array','items':{'$ref':'#'}}", "[1]", 0 },
    /* tuples */
    { "{'prefixItems':[{'type':'string'},{'type':'integer'}]}", "[]", 1 },
    { "{'prefixItems':[{'type':'string'},{'type':'integer'}]}", "['a']", 1 },
    { "{'prefixItems':[{'type':'string'},{'type':'integer'}]}", "['a',1,null,{}]", 1 },
    { "{'prefixItems':[{'type':'string'},{'type':'integer'}]}", "[1,'a']", 0 },
    { "{'prefixItems':[{'type':'string'},{'type':'integer'}],'items':false,'minItems':2}", "['a',1]", 1 },
    { "{'prefixItems':[{'type':'string'},{'type':'integer'}],'items':false,'minItems':2}", "['a']", 0 },
    { "{'prefixItems':[{'type':'string'},{'type':'integer'}],'items':false,'minItems':2}", "['a',1,2]", 0 },
    { "{'prefixItems':[{'type':'null'}],'items':{'type':'boolean'},'maxItems':3}", "[null,true,false]", 1 },
    { "{'prefixItems':[{'type':'null'}],'items':{'type':'boolean'},'maxItems':3}", "[null,true,false,true]", 0 },
    { "{'prefixItems':[{'type':'null'}],'items':{'type':'boolean'},'maxItems':3}", "[null,1]", 0 },
    /* scalars */
    { "{'type':'number'}", "0", 1 },
    { "{'type':'number'}", "-1.5e+10", 1 },
    { "{'type':'number'}", "3.25E-2", 1 },
    { "{'type':'number'}", "01", 0 },
    { "{'type':'number'}", "1.", 0 },
    { "{'type':'number'}", ".5", 0 },
    { "{'type':'number'}", "+1", 0 },
    { "{'type':'number'}", "NaN", 0 },
    { "{'type':'integer'}", "-0", 1 },
    { "{'type':'integer'}", "1234567890123456", 1 },
    { "{'type':'integer'}", "12345678901234567", 0 },
    { "{'type':'integer'}", "4.0", 0 },
    { "{'type':'integer'}", "1e3", 0 },
    { "{'type':'boolean'}", "true", 1 },
    { "{'type':'boolean'}", "True", 0 },
    { "{'type':'null'}", "null", 1 },
    { "{'type':'null'}", "nul", 0 },
    { "{'type':'string'}", "'tab\\t quote\\' slash\\/ \\ud83d\\ude00 \xf0\x9f\x98\x80'", 1 },
    { "{'type':'string'}", "'unterminated", 0 },
    { "{'type':'string'}", "'\\u12g4'", 0 },
    { "{'type':'string','minLength':2,'maxLength':3}", "'\\u00e9x'", 1 },
    { "{'type':'string','minLength':2,'maxLength':3}", "'\xc3\xa9x\xc3\xa9'", 1 },
    { "{'type':'string','minLength':2,'maxLength':3}", "'x'", 0 },
    { "{'type':'string','minLength':2,'maxLength':3}", "'abcd'", 0 },
    { "{'type':['string','null'],'maxLength':3}", "'abc'", 1 },
    { "{'type':['string','null'],'maxLength':3}", "null", 1 },
    { "{'type':['string','null'],'maxLength':3}", "'abcd'", 0 },
    { "{'type':['string','null'],'maxLength':3}", "1", 0 },
    /* enum, const */
    { "{'enum':['red','green',3,null,{'k':[1]}]}", "'red'", 1 },
    { "{'enum':['red','green',3,null,{'k':[1]}]}", "3", 1 },
    { "{'enum':['red','green',3,null,{'k':[1]}]}", "null", 1 },
    { "{'enum':['red','green',3,null,{'k':[1]}]}", "{ 'k' : [ 1 ] }", 1 },
    { "{'enum':['red','green',3,null,{'k':[1]}]}", "'blue'", 0 },
    { "{'enum':['red','green',3,null,{'k':[1]}]}", "'Red'", 0 },
    { "{'enum':['red','green',3,null,{'k':[1]}]}", "{'k':[1,1]}", 0 },
    { "{'const':'a\\'b\\nc'}", "'a\\'b\\nc'", 1 },
    { "{'const':'a\\'b\\nc'}", "'a\\'b\nc'", 0 },
    { "{'type':'string','enum':['x',1]}", "1", 0 },
    /* anyOf, oneOf, $ref */
    { "{'anyOf':[{'type':'string'},{'type':'integer'}]}", "'x'", 1 },
    { "{'anyOf':[{'type':'string'},{'type':'integer'}]}", "7", 1 },
    { "{'anyOf':[{'type':'string'},{'type':'integer'}]}", "true", 0 },
    { "{'oneOf':[{'type':'object','properties':{'a':{'const':1}},'required':['a']},{'type':'null'}]}", "{'a':1}", 1 },
    { "{'oneOf':[{'type':'object','properties':{'a':{'const':1}},'required':['a']},{'type':'null'}]}", "{'a':2}", 0 },
    { LIST, "{'value':1,'next':{'value':2,'next':null}}", 1 },
    { LIST, "{'value':1,'next':null}", 1 },
    { LIST, "{'value':1,'next':{'next':null}}", 0 },
    { LIST, "{'value':1}", 0 },
    { "{'definitions':{'P':{'type':'integer'}},'properties':{'p':{'$ref':'#/definitions/P'}},'required':['p']}", "{'p':5}", 1 },
    { "{'definitions':{'P':{'type':'integer'}},'properties':{'p':{'$ref':'#/definitions/P'}},'required':['p']}", "{'p':'5'}", 0 },
    /* any value */
    { "{}", "{'a':[1,'x',null,true,{}]}", 1 },
    { "{}", "-2.5", 1 },
    { "{}", "'s'", 1 },
    { "{}", "{a:1}", 0 },
    { "{}", "[1,]", 0 },
    { "true", "[[[]]]", 1 },
    { "true", "", 0 },
    /* integer bounds (the ranges are checked integer by integer in integer_ranges) */
    { "{'type':'integer','minimum':-3,'exclusiveMaximum':100}", "99", 1 },
    { "{'type':'integer','minimum':-3,'exclusiveMaximum':100}", "100", 0 },
    { "{'type':'integer','minimum':-3,'exclusiveMaximum':100}", "-0", 0 },
    { "{'type':'integer','minimum':0.5}", "1", 1 },
    { "{'type':'integer','minimum':0.5}", "0", 0 },
    { "{'type':'integer','maximum':5,'exclusiveMaximum':true}", "5", 0 },
    /* patterns: anchored, unanchored (a search), classes, groups, escapes */
    { "{'type':'string','pattern':'^[a-z]+@[a-z]+\\\\.com$'}", "'ab@cd.com'", 1 },
    { "{'type':'string','pattern':'^[a-z]+@[a-z]+\\\\.com$'}", "'ab@cd.org'", 0 },
    { "{'type':'string','pattern':'^[a-z]+@[a-z]+\\\\.com$'}", "'Ab@cd.com'", 0 },
    { "{'type':'string','pattern':'^\\\\d{3}-\\\\d{4}$'}", "'555-1234'", 1 },
    { "{'type':'string','pattern':'^\\\\d{3}-\\\\d{4}$'}", "'5555-123'", 0 },
    { "{'type':'string','pattern':'^(foo|bar)+$'}", "'foobarfoo'", 1 },
    { "{'type':'string','pattern':'^(foo|bar)+$'}", "'fob'", 0 },
    { "{'type':'string','pattern':'ab'}", "'xxabyy'", 1 },
    { "{'type':'string','pattern':'ab'}", "'xxayy'", 0 },
    { "{'type':'string','pattern':'^[^0-9]*$'}", "'abc'", 1 },
    { "{'type':'string','pattern':'^[^0-9]*$'}", "'a1'", 0 },
    { "{'type':'string','pattern':'^\\\\w+\\\\s\\\\w+$'}", "'hi there'", 1 },
    { "{'type':'string','pattern':'^\\\\w+\\\\s\\\\w+$'}", "'hi\\nthere'", 1 },
    { "{'type':'string','pattern':'^\\\\w+\\\\s\\\\w+$'}", "'hi-there'", 0 },
    { "{'type':'string','pattern':'^a\\\\\\'b$'}", "'a\\'b'", 1 },
    { "{'type':'string','pattern':'^x?y{2,3}z*$'}", "'yyyzz'", 1 },
    { "{'type':'string','pattern':'^x?y{2,3}z*$'}", "'xyzz'", 0 },
    /* formats */
    { "{'type':'string','format':'date'}", "'2024-02-29'", 1 },
    { "{'type':'string','format':'date'}", "'2024-13-01'", 0 },
    { "{'type':'string','format':'date-time'}", "'2024-01-01T12:30:00.5+02:00'", 1 },
    { "{'type':'string','format':'date-time'}", "'2024-01-01 12:30:00'", 0 },
    { "{'type':'string','format':'uuid'}", "'123e4567-e89b-12d3-a456-426614174000'", 1 },
    { "{'type':'string','format':'uuid'}", "'123e4567e89b12d3a456426614174000'", 0 },
    { "{'type':'string','format':'email'}", "'a.b+c@mail.example.com'", 1 },
    { "{'type':'string','format':'email'}", "'a@@b.com'", 0 },
    { "{'type':'string','format':'ipv4'}", "'192.168.0.255'", 1 },
    { "{'type':'string','format':'ipv4'}", "'256.1.1.1'", 0 },
    { "{'type':'string','format':'hostname'}", "'my-host.example'", 1 },
    { "{'type':'string','format':'hostname'}", "'-bad.example'", 0 },
};

/* Integer bounds, checked against the bounds themselves: every integer in
 * [-2100, 2100], the powers of ten and their neighbours up to 10^15, and the
 * 8 integers around the lower bound (the upper one without it) are matched
 * exactly when within them (no "-0", no leading zeros). */
static void integer_ranges(void)
{
    static const struct { long long lo, hi; int has_lo, has_hi; } R[] = {
        { 0, 9, 1, 1 }, { 1, 10, 1, 1 }, { -5, 5, 1, 1 }, { 7, 7, 1, 1 }, { -1000, -1, 1, 1 }, { 15, 1234, 1, 1 },
        { -99, 0, 1, 1 }, { 100, 0, 1, 0 }, { 0, -17, 0, 1 }, { 0, 250, 0, 1 }, { 0, 0, 1, 0 }, { 999, 1001, 1, 1 },
        { 10, 99, 1, 1 }, { 123, 4567, 1, 1 }, { -2047, 1999, 1, 1 }, { -3, 0, 1, 0 }, { 1000000, 0, 1, 0 },
        { -12345678, 87654321, 1, 1 },
    };
    long long extra[64];
    int n_extra = 0;
    for (long long p = 10; p <= 1000000000000000LL; p *= 10) {
        extra[n_extra++] = p; extra[n_extra++] = p - 1; extra[n_extra++] = -p; extra[n_extra++] = 1 - p;
    }
    for (size_t k = 0; k < sizeof R / sizeof R[0]; k++) {
        char schema[160], inst[32];
        int n = snprintf(schema, sizeof schema, "{\"type\":\"integer\"");
        if (R[k].has_lo) n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"minimum\":%lld", R[k].lo);
        if (R[k].has_hi) n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"maximum\":%lld", R[k].hi);
        snprintf(schema + n, sizeof schema - (size_t)n, "}");
        mor_status st;
        char *g = convert(schema, &st);
        grammar_rules *gr = NULL;
        REQUIRE(g && grammar_parse(g, strlen(g), NULL, "test", &gr) == MOR_OK, "%s converts and parses", schema);
        int bad = 0;
        long long first_bad = 0;
        /* under emulation (MOR_TEST_EMULATED, tests/cross-test.sh: ~100x slower) the window
         * shrinks to [-130, 130]; the bounds' own neighbourhoods and the powers of ten stay */
        const long long w = getenv("MOR_TEST_EMULATED") ? 130 : 2100;
        for (long long i = -w - n_extra; i <= w + 8; i++) {
            long long x = i < -w ? extra[-w - 1 - i] : i <= w ? i : R[k].lo + (i - w) - 4;
            if (i > w && !R[k].has_lo) x = R[k].hi + (i - w) - 4;
            snprintf(inst, sizeof inst, "%lld", x);
            int want = (!R[k].has_lo || x >= R[k].lo) && (!R[k].has_hi || x <= R[k].hi);
            if (grammar_match(gr, inst, strlen(inst)) != want && !bad++) first_bad = x;
        }
        CHECK(!bad, "%s: each of %lld integers matched exactly when within the bounds (%d wrong, first %lld)",
              schema, 2 * w + 9 + n_extra, bad, first_bad);
        grammar_rules_free(gr);
        free(g);
    }
}

/* For the check lines: control characters as \\n, \\t, \\xNN. */
static const char *shown(const char *s, char *out, size_t cap)
{
    size_t k = 0;
    for (; *s && k + 5 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n') { out[k++] = '\\'; out[k++] = 'n'; }
        else if (c == '\t') { out[k++] = '\\'; out[k++] = 't'; }
        else if (c < 0x20) k += (size_t)snprintf(out + k, cap - k, "\\x%02x", c);
        else out[k++] = (char)c;
    }
    out[k] = 0;
    return out;
}

static void acceptance(void)
{
    int n_ok = 0, n_tables = (int)(sizeof TABLE / sizeof TABLE[0]), n_acc = 0;
    for (int i = 0; i < n_tables; i++) {
        char schema[1024], inst[512];
        unquote(schema, TABLE[i].schema, sizeof schema);
        unquote(inst, TABLE[i].instance, sizeof inst);
        mor_status st;
        char *g = convert(schema, &st);
        grammar_rules *gr = NULL;
        mor_status pst = g ? grammar_parse(g, strlen(g), NULL, "test", &gr) : st;
        int m = pst == MOR_OK ? grammar_match(gr, inst, strlen(inst)) : -100;
        int ok = m == TABLE[i].accept;
        n_ok += ok;
        n_acc += TABLE[i].accept;
        char show[1024];
        CHECK(ok, "schema %s %s %s (match %d%s%s)", schema, TABLE[i].accept ? "accepts" : "rejects",
              shown(inst, show, sizeof show), m,
              pst ? ": " : "", pst ? mor_last_error() : "");
        grammar_rules_free(gr);
        free(g);
    }
    CHECK(n_tables >= 40 && n_acc > 10 && n_tables - n_acc > 10, "the table has %d pairs, %d accepted, %d rejected",
          n_tables, n_acc, n_tables - n_acc);
}

int main(void)
{
    features();
    errors();
    contract();
    large();
    acceptance();
    integer_ranges();
    return check_done();
}
