// The bearer check, in constant time: both sides are hashed to SHA-256 first, so the
// comparison takes the same time whatever the lengths and wherever they first differ.
const encoder = new TextEncoder();

async function digest(text: string): Promise<ArrayBuffer> {
  return crypto.subtle.digest("SHA-256", encoder.encode(text));
}

export async function bearerMatches(header: string | null, token: string | undefined): Promise<boolean> {
  if (!token) return false; // a Worker deployed without its secret refuses everyone
  const given = header?.startsWith("Bearer ") ? header.slice("Bearer ".length) : "";
  const [a, b] = await Promise.all([digest(given), digest(token)]);
  return crypto.subtle.timingSafeEqual(a, b) && given.length > 0;
}
