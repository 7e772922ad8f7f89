package extract

import "bytes"

// utf8BOM is the byte order mark some clients (.NET's, PowerShell's) put
// before UTF-8 JSON.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

// jsonText is a body as the router reads it and as it goes to vLLM: UTF-8
// JSON without a byte order mark. vLLM parses bodies with Python's json,
// which also reads a body after a UTF-8 BOM and a body in UTF-16 or UTF-32;
// a body the router cannot read must be refused rather than forwarded, or
// its cache_salt would reach vLLM unchecked. So the BOM is dropped (vLLM
// reads the body the same without it), and the encodings Python would
// detect (json.detect_encoding: a UTF-16/32 BOM, or a zero byte among the
// first two) are refused: JSON text in UTF-8 holds no zero byte outside
// strings, so none of its bodies looks like them.
func jsonText(body []byte) ([]byte, error) {
	if len(body) >= 2 && (body[0] == 0 || body[1] == 0 ||
		body[0] == 0xff && body[1] == 0xfe || body[0] == 0xfe && body[1] == 0xff) {
		return nil, &SyntaxError{Offset: 0, Msg: "the body must be JSON in UTF-8, not UTF-16 or UTF-32"}
	}
	return bytes.TrimPrefix(body, utf8BOM), nil
}
