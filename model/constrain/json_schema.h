// JSON Schema (the subset OpenAI's strict mode and the common libraries use) and JSON mode as GBNF
// (grammar.h), the way llama.cpp's json-schema-to-grammar does. Supported: type (one or a list),
// object properties / required / additionalProperties (false, true or a schema), arrays with items,
// prefixItems, minItems and maxItems, strings with enum, const, minLength, maxLength, pattern (a
// regular-expression subset) and the formats date, time, date-time and uuid, number, integer (with
// minimum and maximum), boolean, null, enum and const of any value, anyOf and oneOf (as anyOf),
// allOf of one schema, $ref to #, #/$defs/... and #/definitions/... (recursion included). Properties
// come in the schema's order. Annotations (title, description, default, examples, $schema, $id,
// $comment, ...) are ignored; any other keyword is refused, naming it and where it is.
#ifndef STEADY_MODEL_CONSTRAIN_JSON_SCHEMA_H_
#define STEADY_MODEL_CONSTRAIN_JSON_SCHEMA_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace steady {

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
std::string JsonObjectGbnf();

// INVALID_ARGUMENT for text that is not JSON, or a schema (or keyword) outside the subset, naming
// the JSON pointer where it is ("schema: /properties/age: unsupported keyword `format`: ...").
absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json);

}  // namespace steady

#endif  // STEADY_MODEL_CONSTRAIN_JSON_SCHEMA_H_
