<?php
// The one helper the PHP producer and worker share: a call to dq-server's API with curl.

declare(strict_types=1);

/** dq answered with an error: getCode() is the HTTP status, $dqCode dq's error code. */
final class DqError extends RuntimeException
{
    public function __construct(int $status, public readonly string $dqCode, string $message)
    {
        parent::__construct("HTTP $status $dqCode: $message", $status);
    }
}

/**
 * One call to dq-server: the JSON answer as an array (null for an empty one, e.g. 204). Throws DqError
 * for an error answer, RuntimeException when no answer came (then the call may or may not have run).
 */
function dq_api(string $method, string $path, ?array $body = null, int $timeoutMs = 10000): ?array
{
    $url = rtrim(getenv('DQ_URL') ?: 'http://127.0.0.1:6789', '/') . $path;
    $headers = [];
    if ($body !== null) {
        $headers[] = 'Content-Type: application/json'; // dq refuses a body declared otherwise
    }
    $token = getenv('DQ_TOKEN');
    if ($token) {
        $headers[] = "Authorization: Bearer $token";
    }
    $ch = curl_init($url);
    curl_setopt_array($ch, [
        CURLOPT_CUSTOMREQUEST => $method,
        CURLOPT_HTTPHEADER => $headers,
        CURLOPT_RETURNTRANSFER => true,
        CURLOPT_TIMEOUT_MS => $timeoutMs,
    ]);
    if ($body !== null) {
        // An empty PHP array would encode as [], and dq wants an object.
        curl_setopt($ch, CURLOPT_POSTFIELDS, json_encode($body === [] ? new stdClass() : $body));
    }
    $text = curl_exec($ch);
    $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    $error = curl_error($ch);
    curl_close($ch);
    if ($text === false) {
        throw new RuntimeException("$method $path: $error");
    }
    if ($status >= 300) {
        $err = json_decode($text, true)['error'] ?? ['code' => 'http_error', 'message' => $text];
        throw new DqError($status, (string) $err['code'], (string) $err['message']);
    }
    return trim($text) === '' ? null : json_decode($text, true);
}
