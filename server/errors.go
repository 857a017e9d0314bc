package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// apiError is an error the client sees as OpenAI's error object:
//
//	{"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": "invalid_value"}}
//
// Every handler, OpenAI-compatible or SGLang-native, answers errors this way.
type apiError struct {
	Status  int
	Message string
	Type    string // invalid_request_error (4xx) or server_error (5xx)
	Param   string // the offending request field, "" for none
	Code    string // a machine-readable reason, "" for none
}

func (e *apiError) Error() string { return e.Message }

// Codes, after OpenAI's where it has one.
const (
	codeInvalidJSON     = "invalid_json"
	codeInvalidType     = "invalid_type"
	codeInvalidValue    = "invalid_value"
	codeMissing         = "missing_required_parameter"
	codeUnsupported     = "unsupported_parameter"
	codeContextExceeded = "context_length_exceeded"
	codeModelNotFound   = "model_not_found"
	codeTooLarge        = "request_too_large"
	codeRequestLimit    = "request_limit_exceeded" // a per-request bound of the server
	codeInvalidAPIKey   = "invalid_api_key"
	codeUnavailable     = "unavailable"
	codeAborted         = "request_aborted"
	codeEncoding        = "unsupported_content_encoding"
	codeInternal        = "internal_error"
)

func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...),
		Type: "invalid_request_error", Param: param, Code: code}
}

func serverError(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Message: fmt.Sprintf(format, args...), Type: "server_error", Code: code}
}

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	nullable := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return errorBody{errorObject{Message: e.Message, Type: e.Type, Param: nullable(e.Param), Code: nullable(e.Code)}}
}

// asAPIError turns any error into the apiError the client will see; errors
// that are not already apiErrors are the server's fault.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return serverError(http.StatusInternalServerError, codeInternal, "internal error: %v", err)
}

func writeError(w http.ResponseWriter, err error) {
	ae := asAPIError(err)
	writeJSON(w, ae.Status, ae.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// Only a server bug (a NaN that slipped through) lands here.
		status = http.StatusInternalServerError
		data, _ = json.Marshal(serverError(status, codeInternal, "encode response: %v", err).body())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

// decodeBody reads one JSON object from the request into v. Unknown fields
// are ignored, as SGLang and vLLM do, so clients that send newer OpenAI
// fields keep working; a field of the wrong type is named in the error.
//
// The body is read into one buffer of its announced length and decoded
// from there (a json.Decoder would copy it again into a buffer it grows by
// doubling): with a large body, each copy is tens of megabytes.
func decodeBody(r *http.Request, v any) *apiError {
	data, err := readBody(r)
	if err != nil {
		return decodeError(err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return decodeError(io.EOF)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return decodeError(err)
	}
	return nil
}

// readBody reads the whole body, into a buffer of its Content-Length when
// the client sent one.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	// One byte more than announced, to see a body that runs past it.
	buf := make([]byte, r.ContentLength+1)
	n, err := io.ReadFull(r.Body, buf)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return buf[:n], err
}

func decodeError(err error) *apiError {
	var (
		tooLarge  *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: codeTooLarge,
			Message: fmt.Sprintf("the request body is larger than the server's limit of %d bytes", tooLarge.Limit)}
	case errors.Is(err, io.EOF):
		return badRequest("", codeInvalidJSON, "the request body is empty; send a JSON object")
	case errors.As(err, &syntaxErr) && strings.Contains(syntaxErr.Error(), "after top-level value"):
		return badRequest("", codeInvalidJSON, "malformed JSON: the body holds more than one JSON value; send exactly one object")
	case errors.As(err, &syntaxErr) && strings.Contains(syntaxErr.Error(), "unexpected end of JSON input"):
		return badRequest("", codeInvalidJSON, "malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syntaxErr):
		return badRequest("", codeInvalidJSON, "malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badRequest("", codeInvalidType, "the request body must be a JSON object, not %s", typeErr.Value)
		}
		return wrongType(fieldPath(typeErr.Field), jsonTypeName(typeErr.Type), typeErr.Value)
	}
	return badRequest("", codeInvalidJSON, "malformed JSON: %v", err)
}

// embeddedStructs are the Go names of the structs embedded in request types:
// encoding/json puts them in UnmarshalTypeError.Field, but they are no part
// of the JSON the client sent.
var embeddedStructs = map[string]bool{"openaiCommon": true, "samplingFields": true}

func fieldPath(field string) string {
	parts := strings.Split(field, ".")
	kept := parts[:0]
	for _, p := range parts {
		if !embeddedStructs[p] {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ".")
}

func wrongType(param, want, got string) *apiError {
	return badRequest(param, codeInvalidType, "%s must be %s, got %s", param, want, got)
}

// jsonTypeName names a Go type the way a JSON user thinks of it.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// rawKind names the JSON type of a raw value for error messages.
func rawKind(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return "nothing"
	}
	switch s[0] {
	case '"':
		return "string"
	case '[':
		return "array"
	case '{':
		return "object"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// isNull reports whether a raw field is absent or null.
func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
