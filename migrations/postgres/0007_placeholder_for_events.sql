-- 0007 is the events table (issue 21), written on another branch. This
-- placeholder keeps the numbers without a gap until that migration arrives:
-- delete this file when it does. It changes nothing.
SELECT 1;
